//! The remote-endpoint family of the L2 maps: what each other chassis's Geneve endpoint asks of
//! the frames sent to it (`REMOTE_ENCAPS`, keyed by its encap IP): an outer UDP checksum when its
//! Encap row says `options:csum=true`. Endpoints asking nothing have no entry. Owns its desired
//! values; installs through the state's [`Table`](super::super::tables::Table).

use std::net::Ipv4Addr;

use ovnbpf_common::{REMOTE_ENCAP_CSUM, RemoteEncap, maps::RemoteEncaps};

use super::{
    super::{
        EbpfError, Maps,
        tables::{TableKey, flush_from},
    },
    L2State,
};

impl TableKey<RemoteEncaps> for Ipv4Addr {
    fn slot(&self) -> u32 {
        u32::from_ne_bytes(self.octets())
    }
}

impl L2State {
    /// Endpoint `ip` wants outer checksums (`csum`), or is gone (`None`).
    pub(super) fn set_endpoint_checksum(&mut self, ip: Ipv4Addr, csum: Option<bool>) {
        match csum {
            Some(csum) => self.endpoint_checksums.insert(ip, csum),
            None => self.endpoint_checksums.remove(&ip),
        };
        self.remote_encap_table.mark(ip);
    }

    fn desired_remote_encap(&self, ip: Ipv4Addr) -> Option<RemoteEncap> {
        self.endpoint_checksums
            .get(&ip)
            .copied()
            .unwrap_or(false)
            .then_some(RemoteEncap {
                flags: REMOTE_ENCAP_CSUM,
            })
    }

    /// Writes the marked endpoints.
    pub(super) fn flush_remote_encaps(&mut self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        flush_from(
            self,
            maps,
            |s| &mut s.remote_encap_table,
            |s, &ip| s.desired_remote_encap(ip),
        )
    }
}
