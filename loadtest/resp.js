// k6 load test of Shoal's RESP port with k6's built-in `k6/experimental/redis` client: a
// GET/SET/MGET/INCR/EXPIRE/TTL mix, every answer checked.
//
//   loadtest/run resp                                  # starts a local cluster, runs this
//   k6 run -e SHOAL_ADDR=127.0.0.1:6379 loadtest/resp.js
//
// Scenario `mix` (open model, RATE iterations/s for DURATION). One iteration, on keys of its own
// VU: SET k v; GET k (must be v); GET of 2 random seeded keys; INCR of the VU's counter (must be
// the VU's own count); EXPIRE k 60; TTL k (must be 1..60); MGET of MGET_BATCH seeded keys.
//
// Settings (-e NAME=value): SHOAL_ADDR (host:port or redis://[:password@]host:port), DURATION
// (30s), RATE (100), VALUE_SIZE (32), SEED_KEYS (1000), MGET_BATCH (10), SLO_P99_MS (20).
import { check } from 'k6';
import exec from 'k6/execution';
import { env, intEnv, newRunId, seedKey, valueFor, vuPrefix } from './lib/shoal.js';
import { call, newClient, seedResp } from './lib/resp.js';

const VALUE_SIZE = intEnv('VALUE_SIZE', 32);
const SEED_KEYS = intEnv('SEED_KEYS', 1000);
const MGET_BATCH = intEnv('MGET_BATCH', 10);
const SLO_P99_MS = intEnv('SLO_P99_MS', 20);

export const options = {
  scenarios: {
    mix: {
      executor: 'constant-arrival-rate',
      exec: 'mix',
      rate: intEnv('RATE', 100),
      timeUnit: '1s',
      duration: env('DURATION', '30s'),
      // Open model: a slow cluster shows as latency and dropped iterations, not as less load.
      preAllocatedVUs: 10,
      maxVUs: 100,
    },
  },
  thresholds: {
    // Under 0.1% of commands may fail (an error reply or a broken connection); on loopback with
    // a healthy cluster the expected count is zero.
    resp_failed: ['rate<0.001'],
    // Every answer must be the right one (values, counters, TTLs), not just any reply.
    checks: ['rate>0.999'],
    // p99 per command (1 ms resolution, see lib/resp.js). Single-key commands are one gRPC round
    // trip on loopback; MGET fans out to every node, so it gets twice the budget.
    'resp_cmd_duration{cmd:GET}': [`p(99)<${SLO_P99_MS}`],
    'resp_cmd_duration{cmd:SET}': [`p(99)<${SLO_P99_MS}`],
    'resp_cmd_duration{cmd:INCR}': [`p(99)<${SLO_P99_MS}`],
    'resp_cmd_duration{cmd:MGET}': [`p(99)<${2 * SLO_P99_MS}`],
    // The offered rate must be sustained: a dropped iteration means every VU was stuck.
    dropped_iterations: ['count==0'],
  },
  summaryTrendStats: ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'],
};

// One client per VU (the init context runs once per VU); it connects on first use.
const client = newClient();

export async function setup() {
  return seedResp(client, newRunId(), SEED_KEYS, VALUE_SIZE);
}

// The VU's INCR counter: a VU runs one iteration at a time, so the expected value is exact.
let incrs = 0;

export async function mix(data) {
  const prefix = vuPrefix(data.run, 'resp');
  const key = `${prefix}${exec.vu.iterationInScenario}`;
  const value = valueFor(key, data.size);

  const set = await call('SET', () => client.set(key, value, 0));
  check(set, { 'SET: OK': (r) => r === 'OK' });
  const got = await call('GET', () => client.get(key));
  check(got, { 'GET returns what was SET': (r) => r === value });

  for (let i = 0; i < 2; i++) {
    const k = seedKey(data.run, Math.floor(Math.random() * data.seeded));
    const v = await call('GET', () => client.get(k));
    check(v, { 'GET of a seeded key returns its value': (r) => r === valueFor(k, data.size) });
  }

  const n = await call('INCR', () => client.incr(`${prefix}counter`));
  incrs += 1;
  check(n, { "INCR returns the VU's own count": (r) => r === incrs });

  const expired = await call('EXPIRE', () => client.expire(key, 60));
  check(expired, { 'EXPIRE of an existing key: true': (r) => r === true });
  const ttl = await call('TTL', () => client.ttl(key));
  check(ttl, { 'TTL after EXPIRE 60 is in 1..60': (r) => r >= 1 && r <= 60 });

  const first = Math.floor(Math.random() * data.seeded);
  const keys = [];
  for (let i = 0; i < Math.min(MGET_BATCH, data.seeded); i++) keys.push(seedKey(data.run, (first + i) % data.seeded));
  const values = await call('MGET', () => client.mget(...keys));
  check(values, {
    'MGET returns every value, in order': (r) =>
      Array.isArray(r) && r.length === keys.length && r.every((v, i) => v === valueFor(keys[i], data.size)),
  });
}
