//! The test netplugins: busybox shell scripts for `/opt/network/{setup,add,del}`.
//!
//! (`lo` and `mynet` run on the real netplugin images; this one serves the failure cases.)
//! `shell`: a real bridge network. `setup` creates the bridge named by the entry's
//! `bridge` key with the gateway (`.1` of `ipam.subnet`, a /24) and counts its runs in
//! `/var/lib/kh/setups`; `add` reserves an address with an atomic `mkdir` (keyed by the
//! container UUID, safe under concurrent adds), creates a veth pair in the container's
//! namespace, moves the host end to the host and onto the bridge, and prints the Kurma
//! result; `del` releases the reservation and the link (idempotent). The entry's
//! `khMode` makes it misbehave (`daemon-setup` leaves a background `sleep khDaemonSleep`): `sleep-setup`, `sleep-add` (sleep past any limit: `khSleep` seconds, 600 by default) or
//! `fail-add` (exit 3 with text on stderr), `flood-add` (64 MiB on stdout and on stderr,
//! then exit 3), `fail-del` (exit 4).

/// Reads the entry from stdin into `cfg` and its keys into shell variables.
const PARSE_CONFIG: &str = r#"cfg=$(cat)
key() { echo "$cfg" | sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }
mode=$(key khMode)
seconds=$(key khSleep)
bridge=$(key bridge)
subnet=$(key subnet)
base=${subnet%.0/24}
"#;

pub fn shell_setup() -> String {
    format!(
        r#"#!/bin/sh
{PARSE_CONFIG}
# A background process, double-forked so that it outlives setup (as the spec allows).
[ "$mode" = daemon-setup ] || [ "$mode" = sleep-setup ] && ( sleep "$(key khDaemonSleep)" </dev/null >/dev/null 2>&1 & )
[ "$mode" = sleep-setup ] && sleep "${{seconds:-600}}"
[ -n "$bridge" ] && [ "$base" != "$subnet" ] || {{ echo "need bridge and a /24 ipam.subnet" >&2; exit 2; }}
mkdir -p /var/lib/kh /var/lib/kh-ipam
echo run >> /var/lib/kh/setups
if ! ip link show "$bridge" >/dev/null 2>&1; then
  ip link add name "$bridge" type bridge || exit 1
  ip addr add "$base.1/24" dev "$bridge" || exit 1
fi
ip link set "$bridge" up
"#
    )
}

pub fn shell_add() -> String {
    format!(
        r#"#!/bin/sh
{PARSE_CONFIG}
netns=$1 uuid=$2 ifname=$3
[ "$mode" = sleep-add ] && sleep "${{seconds:-600}}"
if [ "$mode" = fail-add ]; then echo "kh-failure: the subnet is exhausted" >&2; echo partial; exit 3; fi
if [ "$mode" = flood-add ]; then yes kh-flood | head -c 67108864; yes kh-flood | head -c 67108864 >&2; exit 3; fi
n=2
while ! mkdir "/var/lib/kh-ipam/$base.$n" 2>/dev/null; do
  n=$((n+1)); [ $n -lt 255 ] || {{ echo "no free address in $subnet" >&2; exit 2; }}
done
echo "$uuid" > "/var/lib/kh-ipam/$base.$n/owner"
host=kh$(echo "$uuid $ifname" | md5sum | cut -c1-10)
in_ns() {{ nsenter --net="$netns" "$@"; }}
in_ns ip link add name "$host" type veth || exit 1
peer=$(in_ns ip -o link show "$host" | sed -n "s/^[0-9]*: $host@\([^:]*\):.*/\1/p")
in_ns ip link set "$host" netns $$ || exit 1
in_ns ip link set "$peer" name "$ifname" || exit 1
in_ns ip addr add "$base.$n/24" dev "$ifname" || exit 1
in_ns ip link set "$ifname" up || exit 1
# The first network of a container gets the default route.
in_ns ip route add default via "$base.1" 2>/dev/null
ip link set "$host" master "$bridge" || exit 1
ip link set "$host" up || exit 1
echo "{{\"ip4\":{{\"ip\":\"$base.$n/24\",\"gateway\":\"$base.1\"}}}}"
"#
    )
}

pub fn shell_del() -> String {
    format!(
        r#"#!/bin/sh
{PARSE_CONFIG}
uuid=$2 ifname=$3
if [ "$mode" = fail-del ]; then echo "kh-failure: del refused" >&2; exit 4; fi
for dir in /var/lib/kh-ipam/*; do
  [ -f "$dir/owner" ] && [ "$(cat "$dir/owner")" = "$uuid" ] && rm -rf "$dir"
done
host=kh$(echo "$uuid $ifname" | md5sum | cut -c1-10)
ip link del "$host" 2>/dev/null
exit 0
"#
    )
}
