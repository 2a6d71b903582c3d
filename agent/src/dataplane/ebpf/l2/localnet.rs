//! The underlay family of the L2 maps: each switch with a localnet port meets the provider NIC
//! of its network (bridge mappings) with its VLAN tag, both ways: switch → (NIC, VLAN) in
//! `LOCALNETS`, (NIC, VLAN) → switch in `PROVIDER_NETWORKS`. Owns their desired values;
//! installs through the state's [`Table`](super::super::tables::Table)s.

use ovnbpf_common::{
    Localnet, ProviderKey,
    maps::{Localnets, ProviderNetworks},
};

use super::{
    super::{
        EbpfError, Maps,
        tables::{Table, TableKey, flush_from},
    },
    L2State,
};

impl TableKey<Localnets> for u32 {
    fn slot(&self) -> u32 {
        *self
    }
}

impl TableKey<ProviderNetworks> for ProviderKey {
    fn slot(&self) -> ProviderKey {
        *self
    }
}

/// What the underlay family installed.
#[derive(Debug, Default)]
pub(super) struct LocalnetTables {
    pub(super) localnet: Table<Localnets, u32>,
    pub(super) provider: Table<ProviderNetworks, ProviderKey>,
}

impl LocalnetTables {
    pub(super) fn pending(&self) -> usize {
        self.localnet.pending() + self.provider.pending()
    }
}

fn provider_key(localnet: Localnet) -> ProviderKey {
    ProviderKey {
        ifindex: localnet.ifindex,
        vlan: localnet.vlan,
    }
}

impl L2State {
    /// Marks switch `datapath`'s localnet slots: its own, and the provider slot it has
    /// installed and the one it wants (call after its localnet or the bridge mappings change).
    pub(super) fn mark_localnet(&mut self, datapath: u32) {
        self.localnet_tables.localnet.mark(datapath);
        let installed = self
            .localnet_tables
            .localnet
            .installed()
            .get(&datapath)
            .copied();
        for localnet in installed.into_iter().chain(self.desired_localnet(datapath)) {
            self.localnet_tables.provider.mark(provider_key(localnet));
        }
    }

    pub(super) fn desired_localnet(&self, datapath: u32) -> Option<Localnet> {
        let (_, network, tag) = self.localnets.get(&datapath)?;
        Some(Localnet {
            ifindex: self.physical.provider(network)?,
            vlan: u32::from(tag.unwrap_or(0)),
        })
    }

    /// The switch whose localnet is on provider NIC and VLAN `key` (the lowest, should two
    /// claim it): O(localnets), which are few.
    fn desired_provider(&self, key: ProviderKey) -> Option<u32> {
        self.localnets
            .keys()
            .copied()
            .filter(|&datapath| self.desired_localnet(datapath).map(provider_key) == Some(key))
            .min()
    }

    /// Writes the marked localnet slots, the provider side first.
    pub(super) fn flush_localnets(&mut self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        let writes = flush_from(
            self,
            maps,
            |s| &mut s.localnet_tables.provider,
            |s, &key| s.desired_provider(key),
        )?;
        Ok(writes
            + flush_from(
                self,
                maps,
                |s| &mut s.localnet_tables.localnet,
                |s, &datapath| s.desired_localnet(datapath),
            )?)
    }

    /// Removes the localnet slots this state did not install; returns how many went.
    pub(super) fn sweep_localnets(&self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        Ok(self.localnet_tables.provider.sweep(maps)?
            + self.localnet_tables.localnet.sweep(maps)?)
    }
}
