//! Command-line options of the xtask subcommands (`--name value`). Reads only its arguments.

/// The value after `name` in `args`, if `name` is there.
pub fn option<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}
