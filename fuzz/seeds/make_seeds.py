#!/usr/bin/env python3
"""Writes the seed corpora of the JSON-fed fuzz targets (fuzz/corpus/TARGET/): the 1.0.0
specification's examples, one configuration per plugin, results of every version, CNI_ARGS
and libcni cache entries. The netlink seeds come from capture_netlink.py. Rerun after
changing this file: `python3 fuzz/seeds/make_seeds.py`."""
import hashlib
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
CORPUS = os.path.join(HERE, "..", "corpus")
VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]


def write(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


def spec_examples():
    """The JSON blocks of the spec, cleaned as crates/cni-types/tests/it/spec_examples.rs does."""
    text = open(os.path.join(ROOT, "crates/cni-types/tests/data/cni-spec-1.0.0.md")).read()
    out = []
    for block in re.findall(r"```jsonc?\n(.*?)```", text, re.S):
        cleaned, in_string, i = [], False, 0
        while i < len(block):
            c = block[i]
            if c == '"':
                in_string = not in_string
            if not in_string and block.startswith("//", i):
                while i < len(block) and block[i] not in '"\n':
                    i += 1
                continue
            cleaned.append(c)
            i += 1
        s = "".join(cleaned).replace("...", "").replace(", }", " }").replace(",}", "}")
        try:
            out.append(json.loads(s))
        except ValueError:
            pass
    return out


def version_index(v):
    return VERSIONS.index(v) if v in VERSIONS else 6


RESULT_V1 = {
    "cniVersion": "1.1.0",
    "interfaces": [
        {"name": "cni0", "mac": "00:11:22:33:44:55"},
        {"name": "veth1", "mac": "55:44:33:22:11:11", "mtu": 1400},
        {"name": "eth0", "mac": "99:88:77:66:55:44", "mtu": 1400, "sandbox": "/run/netns/blue",
         "socketPath": "/run/vhost.sock", "pciID": "0000:00:1f.6"},
    ],
    "ips": [
        {"interface": 2, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
        {"interface": 2, "address": "fd00::5/64", "gateway": "fd00::1"},
        {"address": "fd01::5/64"},
    ],
    "routes": [
        {"dst": "0.0.0.0/0", "gw": "10.1.0.1", "mtu": 1300, "advmss": 1260, "priority": 10,
         "table": 100, "scope": 0},
        {"dst": "::/0", "gw": "fd00::1"},
        {"dst": "192.168.0.0/24"},
    ],
    "dns": {"nameservers": ["10.1.0.1"], "domain": "example.org", "search": ["a.example.org"],
            "options": ["ndots:2"]},
}


def result_in(version):
    if version in ("0.1.0", "0.2.0"):
        return {
            "cniVersion": version,
            "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1",
                    "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}, {"dst": "192.168.0.0/24"}]},
            "ip6": {"ip": "fd00::5/64", "gateway": "fd00::1", "routes": [{"dst": "::/0"}]},
            "dns": RESULT_V1["dns"],
        }
    r = json.loads(json.dumps(RESULT_V1))
    r["cniVersion"] = version
    if version.startswith("0."):
        for i in r["interfaces"]:
            for k in ("mtu", "socketPath", "pciID"):
                i.pop(k, None)
        for ip in r["ips"]:
            ip["version"] = "6" if ":" in ip["address"] else "4"
        r["routes"] = [{k: v for k, v in route.items() if k in ("dst", "gw")} for route in r["routes"]]
    return r


def results():
    out = [result_in(v) for v in VERSIONS]
    out.append({"cniVersion": "1.0.0", "ips": [{"address": "10.88.0.7/16", "gateway": "10.88.0.1"}],
                "dns": {}})
    out.append({"cniVersion": "0.4.0", "interfaces": [], "ips": [], "dns": {}})
    out.append({"ips": [{"address": "192.0.2.2/24"}]})
    return out


PLUGINS = {
    "bridge": {"bridge": "cni0", "isGateway": True, "ipMasq": True, "hairpinMode": True, "mtu": 1500,
               "vlan": 0, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16",
                                                                      "gateway": "10.88.0.1"}],
                                                                    [{"subnet": "fd00:88::/64"}]],
                                   "routes": [{"dst": "0.0.0.0/0"}]}},
    "ptp": {"ipMasq": True, "mtu": 1400, "ipam": {"type": "host-local", "subnet": "10.1.1.0/24",
                                                  "rangeStart": "10.1.1.10", "rangeEnd": "10.1.1.200"}},
    "macvlan": {"master": "eth0", "mode": "bridge", "ipam": {"type": "dhcp"}},
    "ipvlan": {"master": "eth0", "mode": "l2", "ipam": {"type": "static",
                                                         "addresses": [{"address": "10.10.0.1/24",
                                                                        "gateway": "10.10.0.254"}],
                                                         "routes": [{"dst": "0.0.0.0/0"}],
                                                         "dns": {"nameservers": ["10.10.0.1"]}}},
    "vlan": {"master": "eth0", "vlanId": 5, "linkInContainer": False,
             "ipam": {"type": "host-local", "subnet": "10.5.0.0/24"}},
    "tap": {"multiQueue": True, "mac": "02:00:00:00:00:01", "selinuxcontext": "system_u:system_r:container_t:s0",
            "ipam": {"type": "host-local", "subnet": "10.6.0.0/24"}},
    "dummy": {"ipam": {"type": "host-local", "subnet": "10.7.0.0/24"}},
    "host-device": {"device": "eth1"},
    "loopback": {},
    "host-local": {"ipam": {"type": "host-local", "dataDir": "/var/lib/cni/networks",
                            "ranges": [[{"subnet": "10.9.0.0/16", "rangeStart": "10.9.1.1",
                                         "rangeEnd": "10.9.1.254", "gateway": "10.9.0.1"}]],
                            "resolvConf": "/etc/resolv.conf"}},
    "static": {"ipam": {"type": "static", "addresses": [{"address": "10.10.0.1/24", "gateway": "10.10.0.254"},
                                                       {"address": "3ffe:ffff:0:01ff::1/64"}]}},
    "dhcp": {"ipam": {"type": "dhcp", "daemonSocketPath": "/run/cni/dhcp.sock",
                      "request": [{"option": "subnet-mask"}, {"skipDefault": False}],
                      "provide": [{"option": "host-name", "fromArg": "K8S_POD_NAME"}]}},
    "portmap": {"capabilities": {"portMappings": True}, "snat": True, "backend": "nftables",
                "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
                                                   {"hostPort": 5353, "containerPort": 53, "protocol": "udp",
                                                    "hostIP": "127.0.0.1"}]}},
    "firewall": {"backend": "iptables", "ingressPolicy": "same-bridge"},
    "tuning": {"sysctl": {"net.core.somaxconn": "500", "net.ipv4.conf.IFNAME.arp_filter": "1"},
               "mtu": 1400, "mac": "c2:b0:57:49:47:f1", "promisc": True, "allmulti": True},
    "bandwidth": {"ingressRate": 1000000, "ingressBurst": 100000, "egressRate": 2000000,
                  "egressBurst": 200000, "runtimeConfig": {"bandwidth": {"ingressRate": 4000,
                                                                          "ingressBurst": 800}}},
    "sbr": {"table": 100},
}

ENV = {"ADD": "CNI_COMMAND=ADD\nCNI_CONTAINERID=fz-ctr-1\nCNI_NETNS=/run/netns/fz-none\nCNI_IFNAME=eth0\n"
              "CNI_PATH=/opt/cni/bin\n",
       "DEL": "CNI_COMMAND=DEL\nCNI_CONTAINERID=fz-ctr-1\nCNI_IFNAME=eth0\nCNI_PATH=/opt/cni/bin\n",
       "CHECK": "CNI_COMMAND=CHECK\nCNI_CONTAINERID=fz-ctr-1\nCNI_NETNS=/run/netns/fz-none\nCNI_IFNAME=eth0\n"
                "CNI_PATH=/opt/cni/bin\n",
       "GC": "CNI_COMMAND=GC\nCNI_PATH=/opt/cni/bin\n",
       "STATUS": "CNI_COMMAND=STATUS\nCNI_PATH=/opt/cni/bin\n",
       "VERSION": "CNI_COMMAND=VERSION\n"}


def plugin_confs():
    for name, body in PLUGINS.items():
        conf = {"cniVersion": "1.1.0", "name": "fz-net", "type": name}
        conf.update(body)
        if name in ("portmap", "firewall", "tuning", "bandwidth", "sbr"):
            conf["prevResult"] = RESULT_V1
        yield name, conf


def main():
    examples = spec_examples()
    for ex in examples:
        text = json.dumps(ex, indent=2)
        if "plugins" in ex or "type" in ex:
            write("config", text)
        if "ips" in ex or "ip4" in ex:
            write("result", bytes([version_index(ex.get("cniVersion", "1.0.0"))]) + text.encode())
    for name, conf in plugin_confs():
        write("config", json.dumps(conf))
        command = "ADD"
        if name in ("portmap", "firewall", "sbr"):
            command = "CHECK"
        env = ENV[command]
        if name == "host-local":
            env += "CNI_ARGS=IgnoreUnknown=1;IP=10.9.1.7\n"
        write("plugin_entry", env + "\n" + json.dumps(conf))
    write("config", json.dumps({"cniVersion": "1.1.0", "name": "fz-list", "disableCheck": "true",
                                "disableGC": False, "cniVersions": ["1.0.0", "1.1.0"],
                                "plugins": [c for _, c in plugin_confs()][:4]}))
    for command in ("DEL", "GC", "STATUS", "VERSION"):
        conf = {"cniVersion": "1.1.0", "name": "fz-net", "type": "bridge", "bridge": "fz0",
                "ipam": {"type": "host-local", "subnet": "10.88.0.0/16"}}
        if command == "GC":
            conf["cni.dev/valid-attachments"] = [{"containerID": "fz-ctr-1", "ifname": "eth0"}]
        write("plugin_entry", ENV[command] + "\n" + json.dumps(conf))
    for r in results():
        write("result", bytes([version_index(r.get("cniVersion", "1.0.0"))]) + json.dumps(r).encode())
    for args in ["", "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;"
                 "K8S_POD_INFRA_CONTAINER_ID=0123abcd", "IP=10.88.0.5", "MAC=02:00:00:00:00:01;IP=fd00::5",
                 "K=a=b;E=", "IP"]:
        write("cni_args", args)
    config = json.dumps({"cniVersion": "1.0.0", "name": "fz-net", "plugins": [{"type": "bridge"}]})
    import base64
    for version in ("0.3.1", "1.0.0", "1.1.0"):
        entry = {"kind": "cniCacheV1", "containerId": "fz-ctr-1",
                 "config": base64.b64encode(config.encode()).decode(), "ifName": "eth0",
                 "networkName": "fz-net", "netns": "/run/netns/fz", "cniArgs": [["IgnoreUnknown", "1"]],
                 "capabilityArgs": {"portMappings": [{"hostPort": 80, "containerPort": 8080}]},
                 "result": result_in(version)}
        write("libcni_cache", bytes([version_index(version)]) + json.dumps(entry).encode())
    write("libcni_cache", bytes([4]) + json.dumps(result_in("0.4.0")).encode())  # legacy: bare result


main()
