//! Gratuitous ARPs of a gateway becoming active here (ovn-controller's `send_garp_rarp` for a
//! chassisredirect port it claims): for the gateway port's address and its NAT external
//! addresses, from the port's MAC, out of the provider NIC of the switch behind the port
//! (tagged with its localnet's VLAN), so that the physical network learns at once where the
//! gateway is now. One request each (op 1, sender and target the address, as OVN sends them),
//! when the gateway becomes active; OVN repeats them with a backoff, not done here. Owns the
//! frames and the send-only packet socket; what to announce is the L2 gateway family's.

use std::net::Ipv4Addr;

use tracing::{info, warn};

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

/// Sends `announcements` through `sender` (opened on first use); failures are logged, the
/// next takeover announces again.
pub fn send(sender: &mut Option<Sender>, announcements: &[Announcement]) {
    if announcements.is_empty() {
        return;
    }
    if sender.is_none() {
        match Sender::open() {
            Ok(opened) => *sender = Some(opened),
            Err(error) => {
                warn!(%error, "no packet socket for the gateway's gratuitous ARPs");
                return;
            }
        }
    }
    let Some(socket) = sender.as_ref() else {
        return;
    };
    for announcement in announcements {
        for address in &announcement.addresses {
            let frame = garp_frame(announcement.mac, *address, announcement.vlan);
            match socket.send(announcement.ifindex, &frame) {
                Ok(()) => {
                    info!(%address, ifindex = announcement.ifindex, "gateway active here: gratuitous ARP sent")
                }
                Err(error) => {
                    warn!(%address, ifindex = announcement.ifindex, %error, "gratuitous ARP not sent")
                }
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
