// SPDX-License-Identifier: GPL-2.0
//! The device's counters as ib_core shows them: `rdma statistic` (hw_counters: the device's
//! QUERY_STATS counters, then the transport's event counters under the names mlx5 gives
//! them) and the performance management agent behind sysfs `ports/<p>/counters/`
//! (`process_mad` answering PerfMgt ClassPortInfo, PortCounters and PortCountersExtended from
//! QUERY_COUNTERS). docs/driver.md lists every counter and its meaning.

use crate::{
    dev::RoxDev,
    hw::uapi::{
        admin::{self, PortCounters},
        pma,
    },
    ib::{MadAnswer, MAD_SIZE},
};
use kernel::prelude::*;

/// A hw_counter's name and how to read it from QUERY_COUNTERS' response.
type NamedCounter = (&'static CStr, fn(&PortCounters) -> u64);

/// `[(c"field", |c| c.field), ...]`: each counter named as its `PortCounters` field, said once.
macro_rules! by_field_name {
    ($($field:ident),* $(,)?) => {
        [$((kernel::c_str!(stringify!($field)), |c: &PortCounters| c.$field)),*]
    };
}

/// The transport's counters under mlx5's hw_counters names, each read from QUERY_COUNTERS.
/// The congestion ones count rox-nic's ECN, CNP and DCQCN events; `roce_adp_retrans` its
/// retransmissions before the local ACK timeout (tail probes). `rx_xrc_domain_errors` has
/// no mlx5 counterpart (mlx5 counts no XRC errors): rox's own name. The `bottleneck_*` ones
/// are the lab's congested switch queue in front of the port (rox-nic `--bottleneck`), under
/// the names of a switch's queue counters (SAI/SONiC: packets, bytes, drops, WRED drops, ECN
/// marks, watermark).
const MLX5_NAMED: [NamedCounter; 27] = by_field_name![
    out_of_sequence,
    duplicate_request,
    packet_seq_err,
    implied_nak_seq_err,
    local_ack_timeout_err,
    roce_adp_retrans,
    rnr_nak_retry_err,
    req_cqe_error,
    resp_cqe_error,
    req_remote_access_errors,
    resp_remote_access_errors,
    req_remote_invalid_request,
    resp_local_length_error,
    rx_write_requests,
    rx_read_requests,
    rx_atomic_requests,
    np_cnp_sent,
    np_ecn_marked_roce_packets,
    rp_cnp_handled,
    rp_cnp_ignored,
    rx_xrc_domain_errors,
    bottleneck_packets,
    bottleneck_bytes,
    bottleneck_dropped_packets,
    bottleneck_wred_dropped_packets,
    bottleneck_wred_ecn_marked_packets,
    bottleneck_watermark_bytes,
];

const COUNTER_COUNT: usize = admin::STATS_COUNT + MLX5_NAMED.len();

/// Names of the hw_counters (`rdma statistic`): `admin::STAT_*` by index, then [`MLX5_NAMED`].
pub(crate) const COUNTER_NAMES: [&CStr; COUNTER_COUNT] = {
    let mut names = [c""; COUNTER_COUNT];
    names[admin::STAT_TX_PACKETS] = c"tx_packets";
    names[admin::STAT_TX_BYTES] = c"tx_bytes";
    names[admin::STAT_RX_PACKETS] = c"rx_packets";
    names[admin::STAT_RX_BYTES] = c"rx_bytes";
    names[admin::STAT_RX_DROPPED] = c"rx_dropped";
    names[admin::STAT_RX_ICRC_ERRORS] = c"rx_icrc_errors";
    names[admin::STAT_RETRANSMITS] = c"retransmits";
    names[admin::STAT_NAKS_SENT] = c"naks_sent";
    names[admin::STAT_ACKS_SENT] = c"acks_sent";
    names[admin::STAT_TIMEOUTS] = c"timeouts";
    names[admin::STAT_DUP_REQUESTS] = c"duplicate_requests";
    names[admin::STAT_SEND_WQES] = c"send_wqes";
    names[admin::STAT_RECV_WQES] = c"recv_wqes";
    names[admin::STAT_CQES] = c"cqes";
    names[admin::STAT_EQES] = c"eqes";
    names[admin::STAT_INTERRUPTS] = c"interrupts";
    names[admin::STAT_DOORBELL_SCANS] = c"doorbell_scans";
    names[admin::STAT_WAKEUPS] = c"wakeups";
    names[admin::STAT_WQE_ERRORS] = c"wqe_errors";
    names[admin::STAT_PAGE_FAULTS] = c"page_faults";
    names[admin::STAT_PORT_RX_FRAMES] = c"port_rx_frames";
    names[admin::STAT_PORT_TX_FRAMES] = c"port_tx_frames";
    names[admin::STAT_PORT_TO_NETDEV] = c"port_to_netdev";
    names[admin::STAT_PORT_FROM_NETDEV] = c"port_from_netdev";
    names[admin::STAT_PORT_DROP_MALFORMED] = c"port_drop_malformed";
    names[admin::STAT_PORT_DROP_OVERSIZE] = c"port_drop_oversize";
    names[admin::STAT_PORT_DROP_OTHER_MAC] = c"port_drop_other_mac";
    names[admin::STAT_PORT_DROP_VLAN] = c"port_drop_vlan";
    names[admin::STAT_PORT_DROP_NETDEV] = c"port_drop_netdev";
    names[admin::STAT_RX_UNKNOWN_QP] = c"rx_unknown_qp";
    names[admin::STAT_RX_BAD_KEY] = c"rx_bad_key";
    names[admin::STAT_PORT_DROP_NO_DMAC] = c"port_drop_no_dmac";
    names[admin::STAT_RX_MCAST_COPIES] = c"rx_mcast_copies";
    names[admin::STAT_RX_CNP_DROPPED] = c"rx_cnp_dropped";
    names[admin::STAT_PORT_RX_GSO_REFUSED] = c"port_rx_gso_refused";
    names[admin::STAT_WAKES_TRAPPED] = c"wakes_trapped";
    names[admin::STAT_WAKES_POSTED] = c"wakes_posted";
    names[admin::STAT_WAKEUPS_WIRE] = c"wakeups_wire";
    names[admin::STAT_WAKEUPS_TIMER] = c"wakeups_timer";
    names[admin::STAT_WAKEUPS_DRIVER] = c"wakeups_driver";
    let mut i = 0;
    while i < MLX5_NAMED.len() {
        names[admin::STATS_COUNT + i] = MLX5_NAMED[i].0;
        i += 1;
    }
    let mut i = 0;
    while i < COUNTER_COUNT {
        assert!(!names[i].is_empty(), "every counter needs a name");
        i += 1;
    }
    names
};

/// Reads the hw_counters into `values` (`COUNTER_NAMES` order): two admin queries.
pub(crate) fn read_counters(dev: &RoxDev<'_>, values: &mut [u64]) -> Result {
    let (stats, _) = dev.query::<admin::QueryStats, _>(0)?;
    let (port, _) = dev.query::<admin::QueryCounters, _>(u32::from(admin::PORT_NUM))?;
    let (stat_values, named_values) = values.split_at_mut(admin::STATS_COUNT.min(values.len()));
    for (value, stat) in stat_values.iter_mut().zip(stats) {
        *value = stat;
    }
    for (value, (_, read)) in named_values.iter_mut().zip(MLX5_NAMED) {
        *value = read(&port);
    }
    Ok(())
}

/// The performance management agent: answers PerfMgt GETs of `port` from QUERY_COUNTERS and
/// leaves every other MAD to ib_core.
pub(crate) fn process_mad(
    dev: &RoxDev<'_>,
    port: u32,
    mad: &[u8; MAD_SIZE],
    out: &mut [u8; MAD_SIZE],
) -> Result<MadAnswer> {
    let port = u8::try_from(port).map_err(|_| EINVAL)?;
    pma::answer(mad, out, port, || {
        dev.query::<admin::QueryCounters, _>(u32::from(port))
            .map(|(counters, _)| counters)
    })
}
