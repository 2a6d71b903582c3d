//! Typed Southbound rows for every table ovnbpf reads or writes, decoded from the generic replica
//! on demand. Field names follow the SB schema (`type` is `kind`, `match` is `match_`).

use std::collections::BTreeMap;

use uuid::Uuid;

use super::extract;
use crate::ovsdb::replica::RowRef;

/// Declares a typed row: the struct, its table name and its decoding from a replica row.
macro_rules! sb_row {
    ($(#[$meta:meta])* $name:ident in $table:literal {
        $($(#[$field_meta:meta])* $field:ident: $ty:ty = $extract:ident($column:literal),)*
    }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct $name {
            pub uuid: Uuid,
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        impl $name {
            pub const TABLE: &'static str = $table;
            /// Columns this type reads (the ones ovnbpf monitors).
            pub const COLUMNS: &'static [&'static str] = &[$($column),*];

            #[must_use]
            pub fn from_row(row: &RowRef<'_>) -> Self {
                Self { uuid: row.uuid, $($field: extract::$extract(row, $column),)* }
            }
        }

        impl super::SbRow for $name {
            const TABLE: &'static str = $table;
            fn from_row(row: &RowRef<'_>) -> Self {
                $name::from_row(row)
            }
        }
    };
}

sb_row! {
    /// The single global row: northd's configuration sequence number and options.
    SbGlobal in "SB_Global" {
        nb_cfg: i64 = integer("nb_cfg"),
        options: BTreeMap<String, String> = string_map("options"),
    }
}

sb_row! {
    /// A hypervisor (a node). Each chassis writes its own row.
    Chassis in "Chassis" {
        name: String = string("name"),
        hostname: String = string("hostname"),
        encaps: Vec<Uuid> = uuids("encaps"),
        other_config: BTreeMap<String, String> = string_map("other_config"),
        external_ids: BTreeMap<String, String> = string_map("external_ids"),
    }
}

sb_row! {
    /// Per-chassis state only that chassis writes (nb_cfg acknowledgement).
    ChassisPrivate in "Chassis_Private" {
        name: String = string("name"),
        chassis: Option<Uuid> = optional_uuid("chassis"),
        nb_cfg: i64 = integer("nb_cfg"),
        nb_cfg_timestamp: i64 = integer("nb_cfg_timestamp"),
    }
}

sb_row! {
    /// A tunnel endpoint of a chassis.
    Encap in "Encap" {
        kind: String = string("type"),
        ip: String = string("ip"),
        chassis_name: String = string("chassis_name"),
        options: BTreeMap<String, String> = string_map("options"),
    }
}

sb_row! {
    /// A logical switch or router; `tunnel_key` is the Geneve VNI.
    DatapathBinding in "Datapath_Binding" {
        tunnel_key: u32 = key("tunnel_key"),
        external_ids: BTreeMap<String, String> = string_map("external_ids"),
    }
}

sb_row! {
    /// A logical port.
    PortBinding in "Port_Binding" {
        logical_port: String = string("logical_port"),
        /// "" for a VIF, or patch, localnet, l3gateway, chassisredirect, localport, …
        kind: String = string("type"),
        datapath: Option<Uuid> = optional_uuid("datapath"),
        tunnel_key: u32 = key("tunnel_key"),
        /// Copies of the LSP addresses: "MAC IP…" strings.
        mac: Vec<String> = strings("mac"),
        port_security: Vec<String> = strings("port_security"),
        options: BTreeMap<String, String> = string_map("options"),
        tag: Option<i64> = optional_integer("tag"),
        chassis: Option<Uuid> = optional_uuid("chassis"),
        additional_chassis: Vec<Uuid> = uuids("additional_chassis"),
        encap: Option<Uuid> = optional_uuid("encap"),
        requested_chassis: Option<Uuid> = optional_uuid("requested_chassis"),
        up: Option<bool> = optional_bool("up"),
        gateway_chassis: Vec<Uuid> = uuids("gateway_chassis"),
        ha_chassis_group: Option<Uuid> = optional_uuid("ha_chassis_group"),
    }
}

sb_row! {
    /// One logical flow, on one datapath or on a datapath group.
    LogicalFlow in "Logical_Flow" {
        logical_datapath: Option<Uuid> = optional_uuid("logical_datapath"),
        logical_dp_group: Option<Uuid> = optional_uuid("logical_dp_group"),
        pipeline: String = string("pipeline"),
        priority: i64 = integer("priority"),
        match_: String = string("match"),
        actions: String = string("actions"),
        /// `stage-name`, `stage-hint`, `source`: the compiler keys off `stage-name`.
        external_ids: BTreeMap<String, String> = string_map("external_ids"),
    }
}

sb_row! {
    /// A set of datapaths sharing logical flows.
    LogicalDpGroup in "Logical_DP_Group" {
        datapaths: Vec<Uuid> = uuids("datapaths"),
    }
}

sb_row! {
    /// A learned IP → MAC binding on a router port.
    MacBinding in "MAC_Binding" {
        logical_port: String = string("logical_port"),
        ip: String = string("ip"),
        mac: String = string("mac"),
        datapath: Option<Uuid> = optional_uuid("datapath"),
        timestamp: i64 = integer("timestamp"),
    }
}

sb_row! {
    /// A flood/multicast group of ports on a datapath (`_MC_flood` = 32768, …).
    MulticastGroup in "Multicast_Group" {
        datapath: Option<Uuid> = optional_uuid("datapath"),
        name: String = string("name"),
        tunnel_key: u32 = key("tunnel_key"),
        ports: Vec<Uuid> = uuids("ports"),
    }
}

sb_row! {
    /// `$name` in flow matches.
    AddressSet in "Address_Set" {
        name: String = string("name"),
        addresses: Vec<String> = strings("addresses"),
    }
}

sb_row! {
    /// `@name` in flow matches; SB names are `<datapath key>_<NB name>`.
    PortGroup in "Port_Group" {
        name: String = string("name"),
        ports: Vec<String> = strings("ports"),
    }
}

sb_row! {
    /// A learned MAC → port entry of a switch (for ports with "unknown" addresses).
    Fdb in "FDB" {
        mac: String = string("mac"),
        dp_key: u32 = key("dp_key"),
        port_key: u32 = key("port_key"),
        timestamp: i64 = integer("timestamp"),
    }
}

sb_row! {
    /// DNS records served on datapaths.
    Dns in "DNS" {
        records: BTreeMap<String, String> = string_map("records"),
        datapaths: Vec<Uuid> = uuids("datapaths"),
        options: BTreeMap<String, String> = string_map("options"),
    }
}

sb_row! {
    /// Legacy gateway-chassis binding of a distributed gateway port.
    GatewayChassis in "Gateway_Chassis" {
        name: String = string("name"),
        chassis: Option<Uuid> = optional_uuid("chassis"),
        priority: i64 = integer("priority"),
        options: BTreeMap<String, String> = string_map("options"),
    }
}

sb_row! {
    /// One chassis of an HA group, with its priority.
    HaChassis in "HA_Chassis" {
        chassis: Option<Uuid> = optional_uuid("chassis"),
        priority: i64 = integer("priority"),
    }
}

sb_row! {
    /// A group of chassis that can host a gateway port; the highest priority alive one is active.
    HaChassisGroup in "HA_Chassis_Group" {
        name: String = string("name"),
        ha_chassis: Vec<Uuid> = uuids("ha_chassis"),
        ref_chassis: Vec<Uuid> = uuids("ref_chassis"),
    }
}

sb_row! {
    /// A load balancer backend to probe (northd writes one per backend of a VIP with a
    /// `health_check`); the chassis that hosts `logical_port` probes it and writes `status`
    /// (`online`, `offline`), which northd turns into the VIP's backend list.
    ServiceMonitor in "Service_Monitor" {
        ip: String = string("ip"),
        protocol: Option<String> = optional_string("protocol"),
        port: i64 = integer("port"),
        logical_port: String = string("logical_port"),
        src_mac: String = string("src_mac"),
        src_ip: String = string("src_ip"),
        status: Option<String> = optional_string("status"),
        options: BTreeMap<String, String> = string_map("options"),
    }
}

/// Every table ovnbpf monitors, with the columns it reads. Not Load_Balancer: the flows carry
/// every VIP and backend the datapath needs (ovn-controller reads the table for the hairpin
/// flows' `hairpin_snat_ip` and for affinity, which the flows also say here), and replicating
/// it cost 2 ms per Service change at 5000 Services (one row holds a balancer's every VIP;
/// `bench compile --services`).
pub const MONITORED: &[(&str, &[&str])] = &[
    (SbGlobal::TABLE, SbGlobal::COLUMNS),
    (Chassis::TABLE, Chassis::COLUMNS),
    (ChassisPrivate::TABLE, ChassisPrivate::COLUMNS),
    (Encap::TABLE, Encap::COLUMNS),
    (DatapathBinding::TABLE, DatapathBinding::COLUMNS),
    (PortBinding::TABLE, PortBinding::COLUMNS),
    (LogicalFlow::TABLE, LogicalFlow::COLUMNS),
    (LogicalDpGroup::TABLE, LogicalDpGroup::COLUMNS),
    (MacBinding::TABLE, MacBinding::COLUMNS),
    (MulticastGroup::TABLE, MulticastGroup::COLUMNS),
    (AddressSet::TABLE, AddressSet::COLUMNS),
    (PortGroup::TABLE, PortGroup::COLUMNS),
    (Fdb::TABLE, Fdb::COLUMNS),
    (Dns::TABLE, Dns::COLUMNS),
    (GatewayChassis::TABLE, GatewayChassis::COLUMNS),
    (HaChassis::TABLE, HaChassis::COLUMNS),
    (HaChassisGroup::TABLE, HaChassisGroup::COLUMNS),
    (ServiceMonitor::TABLE, ServiceMonitor::COLUMNS),
];
