//! `handover`: prepares live attachments for the Go reference plugins before an operator
//! swaps their binaries back (cni-plugins' `handover` module says what is written and
//! removed). The attachments come from libcni's result cache, as the reference's DEL
//! will get them.

use crate::commands::{Context, Failure};
use cni_plugins::handover::{self, LiveAttachment};
use cni_types::{CniResult, Version};
use libcni::NetworkAttachment;
use serde_json::Value;

/// The plugin configurations of a cached network configuration: a list's `plugins`, or
/// the single configuration itself.
fn plugins(a: &NetworkAttachment) -> Result<Vec<Value>, Failure> {
    let bad = |why: String| Failure(format!("cache file {}: {why}", a.path.display()));
    let config: Value =
        serde_json::from_slice(&a.config).map_err(|e| bad(format!("config is not JSON: {e}")))?;
    match config.get("plugins") {
        Some(Value::Array(list)) => Ok(list.clone()),
        Some(_) => Err(bad("config's plugins is not a list".into())),
        None => Ok(vec![config]),
    }
}

fn live(a: &NetworkAttachment) -> Result<Option<LiveAttachment>, Failure> {
    let Some(result) = a.result.clone() else {
        // Nothing was attached under this entry (an ADD that failed half-way is rolled
        // back): nothing of ours to hand over.
        return Ok(None);
    };
    let (result, _) = CniResult::parse(result, Version::LATEST)
        .map_err(|e| Failure(format!("cache file {}: result: {e}", a.path.display())))?;
    Ok(Some(LiveAttachment {
        network: a.network.clone(),
        container_id: a.container_id.clone(),
        ifname: a.ifname.clone(),
        plugins: plugins(a)?,
        capability_args: a.capability_args.clone(),
        result,
    }))
}

pub fn handover(ctx: &Context, network: Option<&str>) -> Result<(), Failure> {
    // `--to` has one value today; it is there so that the command says what it prepares for.
    let dry_run = ctx.options.dry_run;
    let cached = ctx.cni.cached_attachments(None)?;
    let mut attachments = Vec::new();
    for a in cached.iter().filter(|a| network.is_none_or(|n| a.network == n)) {
        attachments.extend(live(a)?);
    }
    let done = handover::hand_over(&attachments, dry_run).map_err(|e| Failure(e.msg))?;
    print!("{done}");
    if !dry_run {
        eprintln!(
            "cnitool handover: {} attachment(s) handed over to the reference plugins",
            attachments.len()
        );
    }
    Ok(())
}
