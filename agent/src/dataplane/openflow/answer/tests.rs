use super::*;

const POD_MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0x00, 0x01, 0x05];
const ROUTER_MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0x00, 0x01, 0x01];
const POD: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 5);
const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 1);
const FAR: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 7);

fn packet_in(cookie: u64, data: Vec<u8>, registers: &[(usize, u32)]) -> PacketIn {
    let mut packet_in = PacketIn {
        table: 21,
        cookie,
        in_port: 3,
        metadata: 7,
        data,
        ..PacketIn::default()
    };
    for (index, value) in registers {
        packet_in.registers[*index] = *value;
    }
    packet_in
}

/// An IPv4 frame from the pod to the router's MAC: `protocol`, `ttl`, `payload`, fragment
/// field `fragment`.
fn ipv4_frame(
    destination: Ipv4Addr,
    protocol: u8,
    ttl: u8,
    fragment: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut frame = Vec::new();
    frame.extend(ROUTER_MAC);
    frame.extend(POD_MAC);
    frame.extend(IPV4.to_be_bytes());
    let mut header = ipv4_header(20 + payload.len(), ttl, protocol, POD, destination);
    header[6..8].copy_from_slice(&fragment.to_be_bytes());
    header[10..12].copy_from_slice(&[0, 0]);
    let checksum = internet_checksum(&header);
    header[10..12].copy_from_slice(&checksum.to_be_bytes());
    frame.extend(header);
    frame.extend(payload);
    frame
}

/// The answer with no router advertisements.
fn answer_with(packet_in: &PacketIn) -> Result<Outcome, Unanswered> {
    answer(packet_in, &Adverts::new())
}

fn reply(outcome: Result<Outcome, Unanswered>) -> Reply {
    match outcome {
        Ok(Outcome::Reply(reply)) => reply,
        other => panic!("expected a reply, got {other:?}"),
    }
}

/// Whether the transport checksum over the pseudo-header of IPv4 `frame` holds.
fn transport_checksum_holds(frame: &[u8]) -> bool {
    let ip = &frame[ETH..ETH + 20];
    let transport = &frame[ETH + 20..];
    let mut pseudo = Vec::new();
    pseudo.extend(&ip[12..20]);
    pseudo.extend([0, ip[9]]);
    pseudo.extend(u16::try_from(transport.len()).unwrap().to_be_bytes());
    pseudo.extend(transport);
    internet_checksum(&pseudo) == 0
}

/// The switch's ND responder: a solicitation for a pod's address is answered with an
/// advertisement from the MAC the flow left in the registers, for the target, to the
/// solicitor, flags solicited and override, the target's link-layer address option, a checksum
/// that holds; back out of the port it came in by.
#[test]
fn a_solicitation_gets_the_advertisement_pinctrl_builds() {
    let sender: Ipv6Addr = "fd00::5".parse().unwrap();
    let target: Ipv6Addr = "fd00::9".parse().unwrap();
    let answer_mac = [0x0a, 0x58, 0xfd, 0, 0, 0x09];
    let mut frame = Vec::new();
    frame.extend([0x33, 0x33, 0xff, 0, 0, 0x09]);
    frame.extend(POD_MAC);
    frame.extend(IPV6.to_be_bytes());
    frame.extend([0x60, 0, 0, 0, 0, 32, ICMPV6, 255]);
    frame.extend(sender.octets());
    frame.extend("ff02::1:ff00:9".parse::<Ipv6Addr>().unwrap().octets());
    frame.extend([135, 0, 0, 0, 0, 0, 0, 0]);
    frame.extend(target.octets());
    frame.extend([1, 1]);
    frame.extend(POD_MAC);
    let registers = [
        (2, u32::from_be_bytes([0x0a, 0x58, 0xfd, 0])),
        (3, 0x0009_0000),
        (14, 4),
    ];
    let solicitation = frame;
    let answered = reply(answer_with(&packet_in(
        COOKIE_ND_ADVERTISEMENT,
        solicitation.clone(),
        &registers,
    )));
    assert_eq!(answered.kind, Kind::NdAdvertisement);
    let out = &answered.frame;
    assert_eq!(out.len(), 14 + 40 + 32);
    assert_eq!(&out[0..6], &POD_MAC);
    assert_eq!(&out[6..12], &answer_mac);
    assert_eq!(&out[14..22], &[0x60, 0, 0, 0, 0, 32, ICMPV6, 255]);
    assert_eq!(&out[22..38], &target.octets());
    assert_eq!(&out[38..54], &sender.octets());
    assert_eq!(&out[54..56], &[136, 0]);
    assert_eq!(&out[58..62], &[0x60, 0, 0, 0], "solicited, override");
    assert_eq!(&out[62..78], &target.octets());
    assert_eq!(&out[78..80], &[2, 1]);
    assert_eq!(&out[80..86], &answer_mac);
    let mut pseudo = Vec::new();
    pseudo.extend(&out[22..54]);
    pseudo.extend(32_u32.to_be_bytes());
    pseudo.extend([0, 0, 0, ICMPV6]);
    pseudo.extend(&out[54..]);
    assert_eq!(internet_checksum(&pseudo), 0);
    assert_eq!(
        answered.actions,
        [
            Action::SetField(Field::metadata(7)),
            Action::SetField(Field::register(14, 0)),
            Action::SetField(Field::register(15, 4)),
            Action::Resubmit(OUTPUT),
        ]
    );
    // A router's (`nd_na_router`): the router flag too, the checksum still holding.
    let router = reply(answer_with(&packet_in(
        COOKIE_ND_ROUTER_ADVERTISEMENT,
        solicitation,
        &registers,
    )));
    assert_eq!(
        &router.frame[58..62],
        &[0xe0, 0, 0, 0],
        "router, solicited, override"
    );
    let mut pseudo = Vec::new();
    pseudo.extend(&router.frame[22..54]);
    pseudo.extend(32_u32.to_be_bytes());
    pseudo.extend([0, 0, 0, ICMPV6]);
    pseudo.extend(&router.frame[54..]);
    assert_eq!(internet_checksum(&pseudo), 0);
}

/// A router's time exceeded: from the port's address the flow gives, TTL 254, DF, quoting the
/// expired datagram whole up to 534 bytes, a checksum that holds, back out of the input port;
/// a later fragment is not answered.
#[test]
fn an_expired_datagram_gets_time_exceeded_quoting_it() {
    let payload = [0xab; 92];
    let frame = ipv4_frame(FAR, 17, 1, 0, &payload);
    let registers = [(2, u32::from(GATEWAY)), (14, 2)];
    let answered = reply(answer_with(&packet_in(
        COOKIE_TIME_EXCEEDED,
        frame.clone(),
        &registers,
    )));
    assert_eq!(answered.kind, Kind::TimeExceeded);
    let out = &answered.frame;
    assert_eq!(&out[0..6], &POD_MAC);
    assert_eq!(&out[6..12], &ROUTER_MAC);
    assert_eq!(out.len(), 14 + 20 + 8 + 20 + 92);
    assert_eq!(&out[14..16], &[0x45, 0]);
    assert_eq!(&out[20..22], &[0x40, 0], "DF");
    assert_eq!((out[22], out[23]), (254, ICMP));
    assert_eq!(&out[26..30], &GATEWAY.octets());
    assert_eq!(&out[30..34], &POD.octets());
    assert_eq!(internet_checksum(&out[14..34]), 0);
    assert_eq!(&out[34..36], &[11, 0]);
    assert_eq!(&out[42..], &frame[14..], "the whole datagram quoted");
    assert_eq!(internet_checksum(&out[34..]), 0);
    assert_eq!(
        answered.actions[2],
        Action::SetField(Field::register(15, 2))
    );

    let long = ipv4_frame(FAR, 17, 1, 0, &[0x11; 1000]);
    let out = reply(answer_with(&packet_in(
        COOKIE_TIME_EXCEEDED,
        long,
        &registers,
    )))
    .frame;
    assert_eq!(
        out.len(),
        14 + 20 + 8 + MAX_QUOTE,
        "quoted up to a 576-byte frame"
    );
    assert_eq!(&out[16..18], &(20 + 8 + 534_u16).to_be_bytes());

    let later = ipv4_frame(FAR, 17, 1, 0x0010, &payload);
    assert_eq!(
        answer_with(&packet_in(COOKIE_TIME_EXCEEDED, later, &registers)),
        Err(Unanswered::NotAnswered)
    );
}

/// TCP to a router's address gets pinctrl's reset: RST|ACK from the address and port it was
/// for, sequence 0, acknowledging the sequence + 1, window 0, TTL 63 (routed back on), a TCP
/// checksum that holds; a reset is not answered.
#[test]
fn tcp_to_the_router_gets_a_reset_routed_back() {
    let mut syn = [0_u8; 20];
    syn[0..2].copy_from_slice(&40000_u16.to_be_bytes());
    syn[2..4].copy_from_slice(&80_u16.to_be_bytes());
    syn[4..8].copy_from_slice(&1000_u32.to_be_bytes());
    syn[12] = 5 << 4;
    syn[13] = 0x02;
    let registers = [(7, 3), (14, 2)];
    let frame = ipv4_frame(GATEWAY, TCP, 64, 0x4000, &syn);
    let answered = reply(answer_with(&packet_in(COOKIE_TCP_RESET, frame, &registers)));
    assert_eq!(answered.kind, Kind::TcpReset);
    let out = &answered.frame;
    assert_eq!(out.len(), 14 + 40);
    assert_eq!((&out[0..6], &out[6..12]), (&POD_MAC[..], &ROUTER_MAC[..]));
    assert_eq!((out[22], out[23]), (63, TCP));
    assert_eq!(&out[26..30], &GATEWAY.octets());
    assert_eq!(&out[30..34], &POD.octets());
    assert_eq!(&out[34..36], &80_u16.to_be_bytes());
    assert_eq!(&out[36..38], &40000_u16.to_be_bytes());
    assert_eq!(&out[38..42], &[0; 4], "sequence 0");
    assert_eq!(&out[42..46], &1001_u32.to_be_bytes());
    assert_eq!(&out[46..48], &[0x50, 0x14], "RST|ACK");
    assert_eq!(&out[48..50], &[0, 0], "window 0");
    assert!(transport_checksum_holds(out));
    assert_eq!(
        answered.actions,
        [
            Action::SetField(Field::metadata(7)),
            Action::SetField(Field::register(7, 3)),
            Action::SetField(Field::register(14, 2)),
            Action::Resubmit(ROUTING),
        ],
        "on through routing with the route table and input port"
    );

    syn[13] = 0x04;
    let reset = ipv4_frame(GATEWAY, TCP, 64, 0, &syn);
    assert_eq!(
        answer_with(&packet_in(COOKIE_TCP_RESET, reset, &registers)),
        Err(Unanswered::NotAnswered)
    );
}

/// UDP to a router's address gets port unreachable (the code the flow gives) from that
/// address, TTL 255; the first fragment of an ICMP message is not answered.
#[test]
fn other_traffic_to_the_router_gets_an_unreachable_with_the_flows_code() {
    let frame = ipv4_frame(GATEWAY, 17, 64, 0, &[0, 53, 0, 53, 0, 12, 0, 0, 1, 2, 3, 4]);
    let answered = reply(answer_with(&packet_in(
        COOKIE_UNREACHABLE,
        frame,
        &[(2, 3)],
    )));
    assert_eq!(answered.kind, Kind::PortUnreachable);
    let out = &answered.frame;
    assert_eq!((out[22], out[23]), (255, ICMP));
    assert_eq!(&out[26..30], &GATEWAY.octets());
    assert_eq!(&out[34..36], &[3, 3]);
    assert_eq!(internet_checksum(&out[34..]), 0);

    let gre = ipv4_frame(GATEWAY, 47, 64, 0, &[0; 8]);
    let answered = reply(answer_with(&packet_in(COOKIE_UNREACHABLE, gre, &[(2, 2)])));
    assert_eq!(answered.kind, Kind::ProtocolUnreachable);
    assert_eq!(&answered.frame[34..36], &[3, 2]);

    let fragment = ipv4_frame(GATEWAY, ICMP, 64, 0x2000, &[8, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        answer_with(&packet_in(COOKIE_UNREACHABLE, fragment, &[(2, 2)])),
        Err(Unanswered::NotAnswered)
    );
}

/// A next hop without a MAC: a broadcast ARP request from the output port's MAC (the routed
/// packet's source) and address (`reg1`) for the next hop (`reg0`), out of the output port.
#[test]
fn an_unresolved_next_hop_gets_an_arp_request_out_of_the_output_port() {
    let mut routed = ipv4_frame(FAR, 17, 63, 0, &[0; 8]);
    routed[0..6].fill(0);
    routed[6..12].copy_from_slice(&ROUTER_MAC);
    let registers = [
        (0, u32::from(FAR)),
        (1, u32::from(GATEWAY)),
        (14, 2),
        (15, 5),
    ];
    let answered = reply(answer_with(&packet_in(
        COOKIE_ARP_REQUEST,
        routed,
        &registers,
    )));
    assert_eq!(answered.kind, Kind::ArpRequest);
    let mut expected = vec![0xff; 6];
    expected.extend(ROUTER_MAC);
    expected.extend([0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    expected.extend(ROUTER_MAC);
    expected.extend(GATEWAY.octets());
    expected.extend([0; 6]);
    expected.extend(FAR.octets());
    assert_eq!(answered.frame, expected);
    assert_eq!(
        answered.actions,
        [
            Action::SetField(Field::metadata(7)),
            Action::SetField(Field::register(14, 2)),
            Action::SetField(Field::register(15, 5)),
            Action::Resubmit(OUTPUT),
        ]
    );
}

/// An ARP the router hears reports its sender for MAC learning, with the router port's MAC it
/// was addressed to, or for a broadcast the one its flow gives (none: not reported).
#[test]
fn an_arp_the_router_hears_reports_its_sender() {
    let arp = |destination: [u8; 6], op: u8| {
        let mut frame = Vec::new();
        frame.extend(destination);
        frame.extend(POD_MAC);
        frame.extend([0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, op]);
        frame.extend(POD_MAC);
        frame.extend(POD.octets());
        frame.extend(ROUTER_MAC);
        frame.extend(GATEWAY.octets());
        frame
    };
    assert_eq!(
        answer_with(&packet_in(COOKIE_LEARN, arp(ROUTER_MAC, 2), &[])),
        Ok(Outcome::Heard(HeardNeighbour {
            router: 7,
            router_mac: Mac(ROUTER_MAC),
            ip: IpAddr::V4(POD),
            mac: Mac(POD_MAC),
            request: false,
        }))
    );
    assert_eq!(
        answer_with(&packet_in(COOKIE_LEARN, arp([0xff; 6], 1), &[])),
        Err(Unanswered::NoRouterPort)
    );
    // A broadcast request the router answers: its flow names the port by its MAC.
    let named = [
        (2, u32::from_be_bytes([0x0a, 0x58, 0x0a, 0x00])),
        (3, 0x0101_0000),
    ];
    assert_eq!(
        answer_with(&packet_in(COOKIE_LEARN, arp([0xff; 6], 1), &named)),
        Ok(Outcome::Heard(HeardNeighbour {
            router: 7,
            router_mac: Mac(ROUTER_MAC),
            ip: IpAddr::V4(POD),
            mac: Mac(POD_MAC),
            request: true,
        }))
    );
}

/// Packets from flows that are not ours or not asking, and packets cut short, are counted,
/// not answered.
#[test]
fn what_cannot_be_answered_says_why() {
    let frame = ipv4_frame(GATEWAY, TCP, 64, 0, &[0; 20]);
    assert_eq!(
        answer_with(&packet_in(0xdead_beef, frame.clone(), &[])),
        Err(Unanswered::UnknownCookie)
    );
    assert_eq!(
        answer_with(&packet_in(COOKIE, frame.clone(), &[])),
        Err(Unanswered::UnknownCookie)
    );
    assert_eq!(
        answer_with(&packet_in(COOKIE_TCP_RESET, frame[..40].to_vec(), &[])),
        Err(Unanswered::Malformed)
    );
    assert_eq!(
        answer_with(&packet_in(COOKIE_ND_ADVERTISEMENT, frame, &[])),
        Err(Unanswered::Malformed)
    );
}

const POD6: &str = "fd00:10:1::5";
const GATEWAY6: &str = "fd00:10:1::1";
const FAR6: &str = "fd00:10:2::7";

/// An IPv6 frame from the pod to the router's MAC, traffic class and flow label set.
fn ipv6_frame(destination: &str, next_header: u8, hop_limit: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    frame.extend(ROUTER_MAC);
    frame.extend(POD_MAC);
    frame.extend(IPV6.to_be_bytes());
    frame.extend(ipv6_header(
        [0x6a, 0xb1, 0x23, 0x45],
        payload.len(),
        (next_header, hop_limit),
        POD6.parse().unwrap(),
        destination.parse().unwrap(),
    ));
    frame.extend(payload);
    frame
}

/// Whether the transport checksum of IPv6 `frame` holds over its pseudo header.
fn checksum6_holds(frame: &[u8]) -> bool {
    let payload = &frame[ETH + 40..];
    let mut whole = Vec::new();
    whole.extend(&frame[ETH + 8..ETH + 40]);
    whole.extend(u32::try_from(payload.len()).unwrap().to_be_bytes());
    whole.extend([0, 0, 0, frame[ETH + 6]]);
    whole.extend(payload);
    internet_checksum(&whole) == 0
}

/// IPv6's answers: time exceeded from the port's address the flow left in `xxreg1`, hop limit
/// 254, the packet's traffic class and flow label, quoting it up to a 1280-byte answer, back
/// out of the input port; an unreachable from the address it was for (255, routed on); a
/// reset (63, traffic class and flow label 0); a later fragment is not answered.
#[test]
fn ipv6_gets_pinctrls_errors_and_resets() {
    let gateway: Ipv6Addr = GATEWAY6.parse().unwrap();
    let octets = gateway.octets();
    let word = |at: usize| {
        u32::from_be_bytes([octets[at], octets[at + 1], octets[at + 2], octets[at + 3]])
    };
    let registers = [
        (4, word(0)),
        (5, word(4)),
        (6, word(8)),
        (7, word(12)),
        (14, 2),
    ];
    let expired = ipv6_frame(FAR6, 17, 1, &[0x11; 2000]);
    let answered = reply(answer_with(&packet_in(
        COOKIE_TIME_EXCEEDED,
        expired.clone(),
        &registers,
    )));
    assert_eq!(answered.kind, Kind::TimeExceeded);
    let out = &answered.frame;
    assert_eq!(out.len(), 1280, "quoted up to a 1280-byte answer");
    assert_eq!((&out[0..6], &out[6..12]), (&POD_MAC[..], &ROUTER_MAC[..]));
    assert_eq!(
        &out[14..18],
        &[0x6a, 0xb1, 0x23, 0x45],
        "the packet's class and flow label"
    );
    assert_eq!(&out[18..20], &(8 + 1218_u16).to_be_bytes());
    assert_eq!((out[20], out[21]), (ICMPV6, 254));
    assert_eq!(&out[22..38], &gateway.octets());
    assert_eq!(&out[38..54], &POD6.parse::<Ipv6Addr>().unwrap().octets());
    assert_eq!(&out[54..56], &[3, 0]);
    assert_eq!(&out[62..], &expired[14..14 + 1218]);
    assert!(checksum6_holds(out));
    assert_eq!(
        answered.actions[2],
        Action::SetField(Field::register(15, 2))
    );

    let udp = ipv6_frame(GATEWAY6, 17, 64, &[0, 53, 0, 53, 0, 12, 0, 0, 1, 2, 3, 4]);
    let answered = reply(answer_with(&packet_in(
        COOKIE_UNREACHABLE,
        udp.clone(),
        &[(2, 4)],
    )));
    assert_eq!(answered.kind, Kind::PortUnreachable);
    let out = &answered.frame;
    assert_eq!(out.len(), 14 + 40 + 8 + 52);
    assert_eq!((out[20], out[21]), (ICMPV6, 255));
    assert_eq!(
        &out[22..38],
        &gateway.octets(),
        "from the address it was for"
    );
    assert_eq!(&out[54..56], &[1, 4]);
    assert!(checksum6_holds(out));
    assert_eq!(answered.actions.last(), Some(&Action::Resubmit(ROUTING)));

    let mut syn = [0_u8; 20];
    syn[0..2].copy_from_slice(&40000_u16.to_be_bytes());
    syn[2..4].copy_from_slice(&80_u16.to_be_bytes());
    syn[4..8].copy_from_slice(&7_u32.to_be_bytes());
    syn[12] = 5 << 4;
    syn[13] = 0x02;
    let answered = reply(answer_with(&packet_in(
        COOKIE_TCP_RESET,
        ipv6_frame(GATEWAY6, TCP, 64, &syn),
        &[],
    )));
    let out = &answered.frame;
    assert_eq!(out.len(), 14 + 40 + 20);
    assert_eq!(&out[14..18], &[0x60, 0, 0, 0]);
    assert_eq!((out[20], out[21]), (TCP, 63));
    assert_eq!(&out[54..56], &80_u16.to_be_bytes());
    assert_eq!(&out[62..66], &8_u32.to_be_bytes());
    assert_eq!(&out[66..68], &[0x50, 0x14]);
    assert!(checksum6_holds(out));

    // A later fragment: a fragment header with an offset.
    let mut fragment = vec![17, 0, 0, 0x10, 0, 0, 0, 1];
    fragment.extend([0; 16]);
    let later = ipv6_frame(FAR6, 44, 1, &fragment);
    assert_eq!(
        answer_with(&packet_in(COOKIE_TIME_EXCEEDED, later, &registers)),
        Err(Unanswered::NotAnswered)
    );
}

/// An IPv6 next hop without a MAC: the router's solicitation for it (`xxreg0`), from the
/// output port's link-local address to the next hop's solicited-node group, hop limit 255,
/// its MAC as the source link-layer option, out of the output port.
#[test]
fn an_unresolved_ipv6_next_hop_gets_a_solicitation() {
    let next_hop: Ipv6Addr = FAR6.parse().unwrap();
    let octets = next_hop.octets();
    let word = |at: usize| {
        u32::from_be_bytes([octets[at], octets[at + 1], octets[at + 2], octets[at + 3]])
    };
    let mut routed = ipv6_frame(FAR6, 17, 63, &[0; 8]);
    routed[0..6].fill(0);
    routed[6..12].copy_from_slice(&ROUTER_MAC);
    let registers = [
        (0, word(0)),
        (1, word(4)),
        (2, word(8)),
        (3, word(12)),
        (15, 5),
    ];
    let answered = reply(answer_with(&packet_in(
        COOKIE_ARP_REQUEST,
        routed,
        &registers,
    )));
    assert_eq!(answered.kind, Kind::NdSolicitation);
    let out = &answered.frame;
    assert_eq!(out.len(), 14 + 40 + 32);
    assert_eq!(&out[0..6], &[0x33, 0x33, 0xff, 0x00, 0x00, 0x07]);
    assert_eq!(&out[6..12], &ROUTER_MAC);
    assert_eq!((out[20], out[21]), (ICMPV6, 255));
    let link_local: Ipv6Addr = "fe80::858:aff:fe00:101".parse().unwrap();
    assert_eq!(&out[22..38], &link_local.octets());
    let group: Ipv6Addr = "ff02::1:ff00:7".parse().unwrap();
    assert_eq!(&out[38..54], &group.octets());
    assert_eq!(&out[54..58], &[135, 0, out[56], out[57]]);
    assert_eq!(&out[62..78], &next_hop.octets());
    assert_eq!(&out[78..80], &[1, 1]);
    assert_eq!(&out[80..86], &ROUTER_MAC);
    assert!(checksum6_holds(out));
    assert_eq!(
        answered.actions[2],
        Action::SetField(Field::register(15, 5))
    );
}

/// A router solicitation on a port that advertises: the port's advertisement (its message,
/// checksummed) from its MAC and link-local address, in the solicitation's IPv6 header (its
/// traffic class and flow label, hop limit 255), back to the solicitor, or to all nodes when it
/// solicited from `::`; a port without an advertisement does not answer.
#[test]
fn a_router_solicitation_gets_the_ports_advertisement() {
    let message = vec![134, 0, 0xaa, 0xbb, 64, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let mut adverts = Adverts::new();
    adverts.insert(
        7,
        std::collections::HashMap::from([(2, (ROUTER_MAC, message.clone()))]),
    );
    let solicitation = |source: &str| {
        let mut frame = Vec::new();
        frame.extend([0x33, 0x33, 0, 0, 0, 2]);
        frame.extend(POD_MAC);
        frame.extend(IPV6.to_be_bytes());
        frame.extend(ipv6_header(
            [0x60, 0, 0, 0x11],
            8,
            (ICMPV6, 255),
            source.parse().unwrap(),
            "ff02::2".parse().unwrap(),
        ));
        frame.extend([133, 0, 0, 0, 0, 0, 0, 0]);
        frame
    };
    let from = |source: &str, port: u32| {
        answer(
            &packet_in(
                COOKIE_ROUTER_ADVERTISEMENT,
                solicitation(source),
                &[(14, port)],
            ),
            &adverts,
        )
    };
    let answered = reply(from("fe80::5", 2));
    assert_eq!(answered.kind, Kind::RouterAdvertisement);
    let out = &answered.frame;
    assert_eq!((&out[0..6], &out[6..12]), (&POD_MAC[..], &ROUTER_MAC[..]));
    assert_eq!(&out[14..18], &[0x60, 0, 0, 0x11]);
    assert_eq!((out[20], out[21]), (ICMPV6, 255));
    let link_local: Ipv6Addr = "fe80::858:aff:fe00:101".parse().unwrap();
    assert_eq!(&out[22..38], &link_local.octets());
    assert_eq!(
        &out[38..54],
        &"fe80::5".parse::<Ipv6Addr>().unwrap().octets()
    );
    assert_eq!(&out[54..56], &message[..2]);
    assert_eq!(&out[58..], &message[4..], "the port's message");
    assert!(checksum6_holds(out));
    assert_eq!(
        answered.actions[2],
        Action::SetField(Field::register(15, 2))
    );
    let to_all = reply(from("::", 2)).frame;
    assert_eq!(
        &to_all[38..54],
        &"ff02::1".parse::<Ipv6Addr>().unwrap().octets()
    );
    assert!(checksum6_holds(&to_all));
    assert_eq!(from("fe80::5", 3), Err(Unanswered::NotAnswered));
}
