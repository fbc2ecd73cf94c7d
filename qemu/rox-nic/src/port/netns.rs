//! Taps in a private network namespace, for the port benchmark (`rox-port-bench`) and the host
//! tests that drive a device through a tap: the `ip` command and a bridge with two taps, as
//! rox-lab makes them. The namespace itself is [`crate::sys::net::unshare_network_namespace`].

use std::process::Command;

/// Runs `ip ARGS` (in the caller's network namespace: the child inherits it); an error names
/// the command if it could not run or failed.
pub fn ip(args: &[&str]) -> std::io::Result<()> {
    let status = Command::new("ip")
        .args(args)
        .status()
        .map_err(|e| std::io::Error::other(format!("ip {}: {e}", args.join(" "))))?;
    if !status.success() {
        return Err(std::io::Error::other(format!(
            "ip {} failed ({status})",
            args.join(" ")
        )));
    }
    Ok(())
}

/// Bridge br0 with taps `taps`, all up with MTU `mtu`, bridge netfilter off: as rox-lab does
/// for its bridges (if the host loaded br_netfilter, bridged frames would go through this
/// namespace's empty iptables; the lab's wire skips that, so this one does too). Absent keys
/// (no br_netfilter) are fine.
pub fn bridge_with_taps(mtu: usize, taps: &[&str]) -> std::io::Result<()> {
    let mtu = mtu.to_string();
    ip(&["link", "add", "br0", "mtu", &mtu, "type", "bridge"])?;
    for tap in taps {
        ip(&["tuntap", "add", tap, "mode", "tap"])?;
        ip(&["link", "set", tap, "mtu", &mtu, "master", "br0", "up"])?;
    }
    ip(&["link", "set", "br0", "up"])?;
    for table in ["iptables", "ip6tables", "arptables"] {
        let _ = std::fs::write(format!("/proc/sys/net/bridge/bridge-nf-call-{table}"), "0");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_ip_command_is_an_error_that_names_it() {
        // "ip link show dev" of a name no interface can have (longer than IFNAMSIZ).
        let name = "no-such-interface-xyz";
        match ip(&["link", "show", "dev", name]) {
            Err(e) => assert!(e.to_string().contains(name), "{e}"),
            Ok(()) => panic!("ip link show dev {name} succeeded"),
        }
    }
}
