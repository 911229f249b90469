// k6 load test of Shoal's HTTP API (docs/http-api.md): the key/value routes and the batch
// `POST /keys/_mget`.
//
//   loadtest/run http                                 # starts a local cluster, runs this
//   k6 run -e SHOAL_HTTP=http://127.0.0.1:8080 loadtest/http.js
//
// Scenarios (-e SCENARIOS=crud,mget is the default):
//   crud  open model (constant arrival rate): each iteration walks one fresh key through every
//         route: POST (201), POST again (409), GET, PUT with a TTL, GET .../ttl, GET, DELETE, GET (404)
//   mget  open model: POST /keys/_mget of MGET_BATCH seeded keys plus one that does not exist
//   put   closed model, as fast as VUS clients can go: PUT of BENCH_KEYS keys (used by loadtest/compare)
//   get   closed model: GET of random keys that a `put` run wrote (used by loadtest/compare)
//
// Settings (-e NAME=value): SHOAL_HTTP, SCENARIOS, DURATION (30s), RATE (crud iterations/s, 50),
// MGET_RATE (20), MGET_BATCH (20), VALUE_SIZE (bytes, 32), SEED_KEYS (1000), VUS (closed model,
// 50), ITERATIONS (closed model, 100000), BENCH_KEYS (100000), SLO_P99_MS (20).
import http from 'k6/http';
import { check, fail } from 'k6';
import exec from 'k6/execution';
import { HTTP_BASE, env, intEnv, newRunId, pick, seedKey, selected, valueFor, vuPrefix } from './lib/shoal.js';

const DURATION = env('DURATION', '30s');
const VALUE_SIZE = intEnv('VALUE_SIZE', 32);
const SEED_KEYS = intEnv('SEED_KEYS', 1000);
const MGET_BATCH = intEnv('MGET_BATCH', 20);
const BENCH_KEYS = intEnv('BENCH_KEYS', 100000);
const SLO_P99_MS = intEnv('SLO_P99_MS', 20);

const SCENARIOS = {
  crud: {
    executor: 'constant-arrival-rate',
    exec: 'crud',
    rate: intEnv('RATE', 50),
    timeUnit: '1s',
    duration: DURATION,
    // An open model: arrivals do not wait for slow responses, so a slow cluster shows up as
    // latency and dropped iterations instead of quietly lowering the offered load.
    preAllocatedVUs: 10,
    maxVUs: 100,
  },
  mget: {
    executor: 'constant-arrival-rate',
    exec: 'mget',
    rate: intEnv('MGET_RATE', 20),
    timeUnit: '1s',
    duration: DURATION,
    preAllocatedVUs: 5,
    maxVUs: 50,
  },
  put: {
    executor: 'shared-iterations',
    exec: 'put',
    vus: intEnv('VUS', 50),
    iterations: intEnv('ITERATIONS', 100000),
    maxDuration: env('MAX_DURATION', '10m'),
  },
  get: {
    executor: 'shared-iterations',
    exec: 'get',
    vus: intEnv('VUS', 50),
    iterations: intEnv('ITERATIONS', 100000),
    maxDuration: env('MAX_DURATION', '10m'),
  },
};
const chosen = selected(SCENARIOS, ['crud', 'mget']);

// Thresholds are the SLOs; a breach makes k6 exit 99 (and loadtest/run with it).
const thresholds = {
  // Under 0.1% of requests may fail (transport error or a status the route does not document
  // for that case). On loopback with a healthy cluster the expected count is zero.
  http_req_failed: ['rate<0.001'],
  // Every response must carry the right content, not just a 2xx: a cache that answers fast
  // with the wrong value is broken.
  checks: ['rate>0.999'],
};
for (const name of chosen.filter((n) => n === 'crud' || n === 'mget')) {
  // p99 per open-model scenario: single-key routes and _mget are one or a few gRPC round trips
  // on loopback; SLO_P99_MS (default 20 ms) leaves room for a noisy 2-core machine while still
  // catching a stalled node link or a lock convoy. (put and get saturate the cluster on purpose,
  // a closed model whose latency is just VUs / throughput: they are held to zero errors only.)
  thresholds[`http_req_duration{scenario:${name}}`] = [`p(99)<${name === 'mget' ? 2 * SLO_P99_MS : SLO_P99_MS}`];
}
if (chosen.includes('crud') || chosen.includes('mget')) {
  // The open-model scenarios must sustain their offered rate: a dropped iteration means every
  // VU was stuck waiting on the cluster.
  thresholds.dropped_iterations = ['count==0'];
}

export const options = {
  scenarios: pick(SCENARIOS, chosen),
  thresholds,
  summaryTrendStats: ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'],
};

const JSON_HEADERS = { 'Content-Type': 'application/json' };
const RAW_HEADERS = { 'Content-Type': 'application/octet-stream' };

// Per request: which statuses count as success for http_req_failed, and a `name` tag holding
// the route (one metric series per route instead of one per key).
function params(route, ...ok) {
  return {
    tags: { name: route },
    responseCallback: http.expectedStatuses(...ok),
    headers: route.startsWith('POST') ? JSON_HEADERS : RAW_HEADERS,
  };
}

function keyUrl(key, suffix = '') {
  return `${HTTP_BASE}/keys/${encodeURIComponent(key)}${suffix}`;
}

// seedHttp: SEED_KEYS keys of VALUE_SIZE bytes, written in parallel batches; used by setup()
// here and by smoke.js. Fails the run (before any load) if the cluster cannot take them.
export function seedHttp(run, count = SEED_KEYS, size = VALUE_SIZE) {
  const ready = http.get(`${HTTP_BASE}/readyz`);
  if (ready.status !== 200) fail(`${HTTP_BASE}/readyz answered ${ready.status}: is the cluster up?`);
  for (let start = 0; start < count; start += 50) {
    const reqs = [];
    for (let i = start; i < Math.min(count, start + 50); i++) {
      const k = seedKey(run, i);
      reqs.push(['PUT', keyUrl(k), valueFor(k, size), params('PUT /keys/{key}', 200)]);
    }
    for (const r of http.batch(reqs)) {
      if (r.status !== 200) fail(`seeding failed: PUT answered ${r.status} ${r.body}`);
    }
  }
  return { run, seeded: count, size };
}

export function setup() {
  return chosen.includes('mget') ? seedHttp(newRunId()) : { run: newRunId(), seeded: 0, size: VALUE_SIZE };
}

// crud: one fresh key per iteration through every single-key route, checking each answer.
export function crud(data) {
  const key = `${vuPrefix(data.run, 'http')}${exec.vu.iterationInScenario}`;
  const v1 = valueFor(key, data.size, 1);
  const v2 = valueFor(key, data.size, 2);

  let r = http.post(`${HTTP_BASE}/keys?ttl=300`, JSON.stringify({ key, value: v1 }), params('POST /keys', 201));
  check(r, { 'POST /keys creates: 201': (x) => x.status === 201 });
  r = http.post(`${HTTP_BASE}/keys`, JSON.stringify({ key, value: 'other' }), params('POST /keys', 409));
  check(r, { 'POST /keys of an existing key: 409': (x) => x.status === 409 });
  r = http.get(keyUrl(key), params('GET /keys/{key}', 200));
  check(r, { 'GET returns the POSTed value': (x) => x.status === 200 && x.body === v1 });

  r = http.put(`${keyUrl(key)}?ttl=60`, v2, params('PUT /keys/{key}', 200));
  check(r, { 'PUT replaces: 200': (x) => x.status === 200 });
  r = http.get(keyUrl(key, '/ttl'), params('GET /keys/{key}/ttl', 200));
  check(r, {
    'TTL after PUT ?ttl=60 is in 1..60': (x) => {
      if (x.status !== 200) return false;
      const t = x.json('ttl');
      return x.json('key') === key && t >= 1 && t <= 60;
    },
  });
  r = http.get(keyUrl(key), params('GET /keys/{key}', 200));
  check(r, { 'GET returns the PUT value': (x) => x.status === 200 && x.body === v2 });

  r = http.del(keyUrl(key), null, params('DELETE /keys/{key}', 200));
  check(r, { 'DELETE: 200': (x) => x.status === 200 });
  r = http.get(keyUrl(key), params('GET /keys/{key}', 404));
  check(r, { 'GET after DELETE: 404': (x) => x.status === 404 });
}

// mget: a batch of seeded keys (a window that slides with the iteration, so the whole seed set
// is read) plus one key that was never written, which must come back as null, in order.
export function mget(data) {
  if (!data.seeded) fail('mget needs seeded keys (SEED_KEYS > 0)');
  const n = Math.min(MGET_BATCH, data.seeded);
  const first = (exec.scenario.iterationInTest * n) % data.seeded;
  const keys = [];
  for (let i = 0; i < n; i++) keys.push(seedKey(data.run, (first + i) % data.seeded));
  const missing = `${vuPrefix(data.run, 'missing')}${exec.vu.iterationInScenario}`;
  keys.push(missing);
  const r = http.post(`${HTTP_BASE}/keys/_mget`, JSON.stringify({ keys }), params('POST /keys/_mget', 200));
  check(r, {
    '_mget returns every value, in order, null for the missing key': (x) => {
      if (x.status !== 200) return false;
      const values = x.json('values');
      if (!Array.isArray(values) || values.length !== keys.length) return false;
      for (let i = 0; i < n; i++) {
        if (values[i].key !== keys[i] || values[i].value !== valueFor(keys[i], data.size)) return false;
      }
      return values[n].key === missing && values[n].value === null;
    },
  });
}

// put / get: the closed-model throughput pair loadtest/compare runs (put first, then get over
// the same keys). Keys are not per run: the get run reads what the put run wrote.
function benchKey(i) {
  return `bench:${VALUE_SIZE}:${i}`;
}

export function put() {
  const key = benchKey(exec.scenario.iterationInTest % BENCH_KEYS);
  const r = http.put(keyUrl(key), valueFor(key, VALUE_SIZE), { tags: { name: 'PUT /keys/{key}' }, responseType: 'none' });
  check(r, { 'PUT: 200': (x) => x.status === 200 });
}

export function get() {
  // Needs a `put` run with ITERATIONS >= BENCH_KEYS before it, so every key exists.
  const r = http.get(keyUrl(benchKey(Math.floor(Math.random() * BENCH_KEYS))), { tags: { name: 'GET /keys/{key}' } });
  // A length check, not a full comparison: this is the throughput run, and comparing 4 KiB
  // strings in JS would measure k6 rather than Shoal. crud and mget check content.
  check(r, { 'GET: 200 with the full value': (x) => x.status === 200 && x.body.length === VALUE_SIZE });
}
