# Measures etcd's own CPU per transaction through the native gRPC API and through the JSON
# gateway; run it with tools/etcd-api-cost (which sets up the Python gRPC client).
import base64, http.client, json, os, subprocess, sys, tempfile, time, threading
import etcd3

N = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
THREADS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
tck = os.sysconf('SC_CLK_TCK')
d = tempfile.mkdtemp(prefix='grpcm')
etcd = subprocess.Popen(['etcd', '--data-dir', d + '/data', '--listen-client-urls', 'http://127.0.0.1:23799',
    '--advertise-client-urls', 'http://127.0.0.1:23799', '--listen-peer-urls', 'http://127.0.0.1:23809',
    '--initial-advertise-peer-urls', 'http://127.0.0.1:23809', '--initial-cluster', 'default=http://127.0.0.1:23809',
    '--log-level', 'error', '--unsafe-no-fsync'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def cpu():
    f = open(f'/proc/{etcd.pid}/stat').read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / tck
for _ in range(100):
    try:
        c = http.client.HTTPConnection('127.0.0.1', 23799); c.request('POST', '/v3/kv/range', '{"key":"AA=="}'); c.getresponse().read(); break
    except Exception: time.sleep(0.1)
value = json.dumps({"containerID": "x" * 64, "ifname": "eth0", "node": "node-1"}).encode()
def b64(b): return base64.b64encode(b).decode()
def run_grpc(prefix):
    def worker(t):
        cl = etcd3.client(host='127.0.0.1', port=23799)
        for i in range(t, N, THREADS):
            k = f'/bench/{prefix}/{i}'
            cl.transaction(compare=[cl.transactions.create(k) == 0], success=[cl.transactions.put(k, value)], failure=[])
    ts = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    [t.start() for t in ts]; [t.join() for t in ts]
def run_json(prefix):
    def worker(t):
        c = http.client.HTTPConnection('127.0.0.1', 23799)
        for i in range(t, N, THREADS):
            k = f'/bench/{prefix}/{i}'.encode()
            body = json.dumps({"compare": [{"key": b64(k), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
                               "success": [{"request_put": {"key": b64(k), "value": b64(value)}}]})
            c.request('POST', '/v3/kv/txn', body, {'content-type': 'application/json'})
            r = c.getresponse(); data = r.read(); assert r.status == 200, data
    ts = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    [t.start() for t in ts]; [t.join() for t in ts]
res = {'grpc': [], 'json': []}
for rnd in range(3):
    for name, fn in (('grpc', run_grpc), ('json', run_json)) if rnd % 2 == 0 else (('json', run_json), ('grpc', run_grpc)):
        c0 = cpu(); w0 = time.time(); fn(f'{name}{rnd}'); c1 = cpu(); w1 = time.time()
        res[name].append((c1 - c0) / N * 1000)
        print(f'round {rnd} {name}: etcd CPU {(c1-c0)/N*1000:.3f} ms/txn, {N/(w1-w0):.0f} txn/s', flush=True)
for k, v in res.items():
    v.sort(); print(f'{k}: median etcd CPU per txn {v[1]:.3f} ms')
etcd.kill(); etcd.wait()
subprocess.run(['rm', '-rf', d])
