//! Carries out the network steps of the plan (plan.rs) on the host.

use anyhow::{Context, Result};

use crate::host::{run, sysctl_in};
use crate::plan::{network_steps, NetworkExtras, Step};
use crate::runner::Runner;

impl Runner {
    /// The lab namespace: a bridge per subnet, a tap per NIC; in the routed shape a router
    /// namespace with a veth into each bridge.
    pub fn build_network(&mut self) -> Result<()> {
        let extras = NetworkExtras {
            uplink: self.cli.uplink.as_deref(),
            host_if: self.cli.host_cmd.is_some(),
        };
        let steps = network_steps(&self.lab, &self.ns, &self.router_ns, &extras);
        for step in steps {
            match step {
                Step::AddNetns(ns) => self.add_netns(&ns)?,
                Step::Ip { ns, args } => {
                    let mut cmd = std::process::Command::new("ip");
                    if let Some(ns) = &ns {
                        cmd.arg("-n").arg(ns);
                    }
                    run(cmd.args(&args)).with_context(|| match ns {
                        None if args.get(3).is_some_and(|a| a == "netns") => {
                            format!("cannot move --uplink {} into the lab", args[2])
                        }
                        _ => "cannot build the lab network".to_string(),
                    })?;
                }
                Step::Sysctl {
                    ns,
                    settings,
                    optional,
                } => {
                    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
                    let r = sysctl_in(&ns, &settings);
                    if !optional {
                        r?;
                    }
                }
            }
        }
        Ok(())
    }
}
