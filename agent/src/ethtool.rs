//! The one ethtool request the agent makes: turning a link's offload features off by name, as
//! `ethtool -K <link> <feature> off` does (the segmenter's sending end must segment UDP-tunnel
//! GSO packets in software, see [`crate::dataplane::ebpf::segmenter`]). Over the `SIOCETHTOOL`
//! ioctl: the feature names are read from the kernel (`ETHTOOL_GSSET_INFO`, `ETHTOOL_GSTRINGS`
//! of `ETH_SS_FEATURES`), since their bit positions differ between kernels, then cleared with
//! `ETHTOOL_SFEATURES` and checked with `ETHTOOL_GFEATURES`. Written here rather than through
//! the ethtool-netlink crates: three fixed-layout requests do not justify a generic-netlink stack
//! and an async runtime's worth of dependencies. Acts in the namespace of the calling thread;
//! touches only the named link's features.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;

/// `struct ifreq` with its `ifr_data` member.
#[repr(C)]
struct InterfaceRequest {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _padding: [u8; 16],
}

/// A socket to send ethtool ioctls through.
fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket call; the descriptor is owned from here on.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends one ethtool command whose buffer (`u32` words, the command first) is `buffer`.
fn ethtool(socket: &OwnedFd, link: &str, buffer: &mut [u32]) -> io::Result<i32> {
    let mut request = InterfaceRequest {
        name: [0; libc::IFNAMSIZ],
        data: buffer.as_mut_ptr().cast(),
        _padding: [0; 16],
    };
    if link.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("link name {link} too long"),
        ));
    }
    request.name[..link.len()].copy_from_slice(link.as_bytes());
    // SAFETY: the request names the link and points at a buffer laid out as the command
    // expects, valid for the call.
    let result = unsafe { libc::ioctl(socket.as_raw_fd(), SIOCETHTOOL, &raw mut request) };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(result)
}

/// The link's feature names, by bit position.
fn feature_names(socket: &OwnedFd, link: &str) -> io::Result<Vec<String>> {
    // ethtool_sset_info: cmd, reserved, sset_mask (u64), then one u32 per set asked for.
    let mut info = [ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_FEATURES, 0, 0];
    ethtool(socket, link, &mut info)?;
    let count = info[4] as usize;
    // ethtool_gstrings: cmd, string_set, len, then `len` names of 32 bytes.
    let mut strings = vec![0_u32; 3 + count * ETH_GSTRING_LEN / 4];
    strings[0] = ETHTOOL_GSTRINGS;
    strings[1] = ETH_SS_FEATURES;
    strings[2] = count as u32;
    ethtool(socket, link, &mut strings)?;
    let bytes: Vec<u8> = strings[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
    Ok(bytes
        .chunks(ETH_GSTRING_LEN)
        .map(|name| {
            let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
            String::from_utf8_lossy(&name[..end]).into_owned()
        })
        .collect())
}

/// The bit position of `feature` among `names`.
fn bit_of(names: &[String], link: &str, feature: &str) -> io::Result<usize> {
    names
        .iter()
        .position(|name| name == feature)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{link} has no feature {feature}"),
            )
        })
}

/// Whether bit `bit` of the link's active features is set, for each of `bits`.
fn active(socket: &OwnedFd, link: &str, blocks: usize, bits: &[usize]) -> io::Result<Vec<bool>> {
    // ethtool_gfeatures: cmd, size, then (available, requested, active, never_changed).
    let mut get = vec![0_u32; 2 + 4 * blocks];
    get[0] = ETHTOOL_GFEATURES;
    get[1] = blocks as u32;
    ethtool(socket, link, &mut get)?;
    Ok(bits
        .iter()
        .map(|&bit| get[2 + 4 * (bit / 32) + 2] & (1 << (bit % 32)) != 0)
        .collect())
}

/// Turns `features` off on `link` and checks that the kernel did; an unknown name, or a feature
/// the driver keeps on, is an error naming it.
pub fn turn_off(link: &str, features: &[&str]) -> io::Result<()> {
    let socket = control_socket()?;
    let names = feature_names(&socket, link)?;
    let blocks = names.len().div_ceil(32);
    let bits = features
        .iter()
        .map(|feature| bit_of(&names, link, feature))
        .collect::<io::Result<Vec<usize>>>()?;
    // ethtool_sfeatures: cmd, size (blocks), then (valid, requested) per block.
    let mut set = vec![0_u32; 2 + 2 * blocks];
    set[0] = ETHTOOL_SFEATURES;
    set[1] = blocks as u32;
    for &bit in &bits {
        set[2 + 2 * (bit / 32)] |= 1 << (bit % 32);
    }
    ethtool(&socket, link, &mut set)?;
    let still_on = active(&socket, link, blocks, &bits)?;
    if let Some((feature, _)) = features.iter().zip(still_on).find(|(_, on)| *on) {
        return Err(io::Error::other(format!(
            "{link} keeps {feature} on after being asked to turn it off"
        )));
    }
    Ok(())
}

/// Whether `feature` is on for `link`.
pub fn is_on(link: &str, feature: &str) -> io::Result<bool> {
    let socket = control_socket()?;
    let names = feature_names(&socket, link)?;
    let bit = bit_of(&names, link, feature)?;
    Ok(active(&socket, link, names.len().div_ceil(32), &[bit])?[0])
}
