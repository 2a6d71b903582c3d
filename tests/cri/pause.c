/* The pod sandbox's only process, like Kubernetes' pause image: sleeps until a signal ends it. */
#include <signal.h>
#include <unistd.h>

static void leave(int signal) { _exit(signal == SIGTERM || signal == SIGINT ? 0 : 1); }

int main(void) {
    signal(SIGTERM, leave);
    signal(SIGINT, leave);
    for (;;) {
        pause();
    }
}
