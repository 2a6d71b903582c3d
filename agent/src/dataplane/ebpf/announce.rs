//! Gratuitous ARPs of a gateway becoming active here (ovn-controller's `send_garp_rarp` for a
//! chassisredirect port it claims): for the gateway port's address and its NAT external
//! addresses, from the port's MAC, out of the provider NIC of the switch behind the port
//! (tagged with its localnet's VLAN), so that the physical network learns at once where the
//! gateway is now. One request each (op 1, sender and target the address, as OVN sends them)
//! when the gateway becomes active, repeated with OVN's backoff at 1, 2, 4 and 8 s while it
//! stays active. Owns the frames, the send-only packet socket and the repeats; what to announce
//! is the L2 gateway family's.

use std::{
    collections::HashMap,
    net::Ipv4Addr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tracing::{debug, info, warn};

use crate::{packet_socket::Sender, pipeline::ir::Mac};

/// What a gateway that became active here announces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announcement {
    /// The provider NIC, and the localnet's VLAN (0: untagged).
    pub ifindex: u32,
    pub vlan: u16,
    pub mac: Mac,
    pub addresses: Vec<Ipv4Addr>,
}

/// The gratuitous ARP request for `address` at `mac`, tagged with `vlan` (0: untagged).
#[must_use]
pub fn garp_frame(mac: Mac, address: Ipv4Addr, vlan: u16) -> Vec<u8> {
    let mut frame = Vec::with_capacity(64);
    frame.extend_from_slice(&[0xff; 6]);
    frame.extend_from_slice(&mac);
    if vlan != 0 {
        frame.extend_from_slice(&0x8100_u16.to_be_bytes());
        frame.extend_from_slice(&(vlan & 0x0fff).to_be_bytes());
    }
    frame.extend_from_slice(&0x0806_u16.to_be_bytes());
    // Ethernet, IPv4, lengths 6 and 4, request.
    frame.extend_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 1]);
    frame.extend_from_slice(&mac);
    frame.extend_from_slice(&address.octets());
    frame.extend_from_slice(&[0; 6]);
    frame.extend_from_slice(&address.octets());
    // Padded to Ethernet's minimum (without the FCS).
    frame.resize(frame.len().max(60), 0);
    frame
}

/// When a gateway that became active here announces itself again, after the first time: OVN's
/// backoff (pinctrl doubles the interval, 1 s first), so that a frame the old gateway still
/// sent, or a lost announcement, does not leave the physical network pointing at it.
const REPEATS: [Duration; 4] = [
    Duration::from_secs(1),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
];

/// Sends the announcements: at once, then [`REPEATS`] on a thread of their own, until the
/// gateway is no longer active here ([`Self::withdraw`]). Owns the send-only socket (opened on
/// first use) and the repeats' stop flags.
#[derive(Debug, Default)]
pub struct Announcer {
    socket: Option<Arc<Sender>>,
    repeating: HashMap<String, Arc<AtomicBool>>,
}

impl Announcer {
    /// The gateway of chassisredirect port `gateway` became active here: `announcement`, now
    /// and repeated.
    pub fn announce(&mut self, gateway: String, announcement: Announcement) {
        let Some(socket) = self.socket() else {
            return;
        };
        info!(addresses = ?announcement.addresses, ifindex = announcement.ifindex, "gateway active here: gratuitous ARPs");
        // The frames, built once for the first send and the repeats.
        let frames: Vec<(Ipv4Addr, Vec<u8>)> = announcement
            .addresses
            .iter()
            .map(|address| {
                let frame = garp_frame(announcement.mac, *address, announcement.vlan);
                (*address, frame)
            })
            .collect();
        let ifindex = announcement.ifindex;
        send(&socket, ifindex, &frames);
        self.withdraw(&gateway);
        let active = Arc::new(AtomicBool::new(true));
        self.repeating.insert(gateway, Arc::clone(&active));
        let repeating = std::thread::Builder::new()
            .name("garp".into())
            .spawn(move || {
                for delay in REPEATS {
                    std::thread::sleep(delay);
                    if !active.load(Ordering::Relaxed) {
                        return;
                    }
                    send(&socket, ifindex, &frames);
                }
            });
        if let Err(error) = repeating {
            warn!(%error, "the gateway's gratuitous ARPs are not repeated");
        }
    }

    /// The gateway of chassisredirect port `gateway` is no longer active here: its repeats
    /// stop.
    pub fn withdraw(&mut self, gateway: &str) {
        if let Some(active) = self.repeating.remove(gateway) {
            active.store(false, Ordering::Relaxed);
        }
    }

    fn socket(&mut self) -> Option<Arc<Sender>> {
        if self.socket.is_none() {
            match Sender::open() {
                Ok(opened) => self.socket = Some(Arc::new(opened)),
                Err(error) => {
                    warn!(%error, "no packet socket for the gateway's gratuitous ARPs");
                }
            }
        }
        self.socket.clone()
    }
}

impl Drop for Announcer {
    fn drop(&mut self) {
        for active in self.repeating.values() {
            active.store(false, Ordering::Relaxed);
        }
    }
}

/// Sends an announcement's `frames` (each with its address) out of `ifindex`; failures are
/// logged.
fn send(socket: &Sender, ifindex: u32, frames: &[(Ipv4Addr, Vec<u8>)]) {
    for (address, frame) in frames {
        match socket.send(ifindex, frame) {
            Ok(()) => {
                debug!(%address, ifindex, "gateway active here: gratuitous ARP sent");
            }
            Err(error) => {
                warn!(%address, ifindex, %error, "gratuitous ARP not sent");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_garp_is_an_arp_request_for_the_address_from_it() {
        let mac = [0x0a, 0x58, 0, 0, 0, 1];
        let frame = garp_frame(mac, Ipv4Addr::new(172, 30, 0, 10), 0);
        assert_eq!(frame.len(), 60);
        assert_eq!(&frame[..6], &[0xff; 6]);
        assert_eq!(&frame[6..12], &mac);
        assert_eq!(&frame[12..14], &[0x08, 0x06]);
        assert_eq!(&frame[20..22], &[0, 1], "a request");
        assert_eq!(&frame[22..28], &mac);
        assert_eq!(&frame[28..32], &[172, 30, 0, 10]);
        assert_eq!(&frame[32..38], &[0; 6]);
        assert_eq!(&frame[38..42], &[172, 30, 0, 10]);
        let tagged = garp_frame(mac, Ipv4Addr::new(172, 30, 0, 10), 100);
        assert_eq!(&tagged[12..18], &[0x81, 0x00, 0, 100, 0x08, 0x06]);
    }
}
