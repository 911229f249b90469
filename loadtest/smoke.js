// Smoke test: a short, bounded pass over everything the other scripts exercise, with strict
// thresholds (no failure of any kind). CI runs it (`.ci/test` -> `loadtest/run smoke`).
//
//   loadtest/run smoke                  # local cluster; also moves it 3 -> 4 -> 3 nodes mid-run
//   k6 run -e SHOAL_ADDR=127.0.0.1:6379 -e SHOAL_HTTP=http://127.0.0.1:8080 loadtest/smoke.js
//
// It reuses the scenario functions of http.js (crud, mget), resp.js (mix) and resharding.js
// (load, scale), in small fixed iteration counts, plus an `ops` check of /healthz, /readyz,
// /metrics and SHOAL TOPOLOGY. SCALE_STEPS (e.g. 4,3; off unless set) adds the online reshard:
// loadtest/run sets it when it started the (embedded) cluster itself.
// Settings (-e NAME=value): SHOAL_ADDR, SHOAL_HTTP, SCALE_STEPS, SMOKE_ITERATIONS (10),
// SMOKE_P99_MS (250).
import http from 'k6/http';
import { check } from 'k6';
import { HTTP_BASE, env, intEnv, newRunId } from './lib/shoal.js';
import { call, newClient, seedResp } from './lib/resp.js';
import { reshardThresholds, scaleSteps, verifySeeds } from './resharding.js';

export { crud as httpCrud, mget as httpMget } from './http.js';
export { mix as respMix } from './resp.js';
export { load as reshardLoad, scale as reshardScale } from './resharding.js';

const ITERATIONS = intEnv('SMOKE_ITERATIONS', 10);
// Loose on purpose: CI runs this against debug builds on a shared 2-core machine. It still
// catches a request that hangs until the router's 1 s node deadline, or a stalled move.
const P99_MS = intEnv('SMOKE_P99_MS', 250);
const STEPS = scaleSteps('none');

// Every scenario is bounded twice: by its iteration count and by maxDuration.
const bounded = (exec, vus, extra = {}) => ({
  executor: 'per-vu-iterations', exec, vus, iterations: ITERATIONS, maxDuration: '30s', ...extra,
});
const scenarios = {
  http_crud: bounded('httpCrud', 2),
  http_mget: bounded('httpMget', 1),
  resp_mix: bounded('respMix', 2),
  ops: bounded('ops', 1, { iterations: 1 }),
  // Writes and verified reads at a fixed rate across the reshard (when SCALE_STEPS is set).
  reshard_load: {
    executor: 'constant-arrival-rate', exec: 'reshardLoad', rate: 50, timeUnit: '1s',
    duration: STEPS.length ? `${4 + 2 * STEPS.length}s` : '3s', preAllocatedVUs: 5, maxVUs: 20,
  },
};
if (STEPS.length) {
  scenarios.reshard_scale = bounded('reshardScale', 1, { iterations: 1, startTime: '1s', maxDuration: '25s' });
}

export const options = {
  scenarios,
  thresholds: {
    ...reshardThresholds(STEPS, 'reshard_load'),
    // Strict: nothing may fail in a smoke run.
    checks: ['rate==1'],
    http_req_failed: ['rate==0'],
    resp_failed: ['rate==0'],
    http_req_duration: [`p(99)<${P99_MS}`],
    resp_cmd_duration: [`p(99)<${P99_MS}`],
  },
  summaryTrendStats: ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'],
};

const client = newClient();

// One seed set serves every scenario: http.js, resp.js and resharding.js all read seedKey(run, i)
// with valueFor(key, size).
export async function setup() {
  return seedResp(client, newRunId(), 500, 32);
}

export async function ops() {
  check(http.get(`${HTTP_BASE}/healthz`), { '/healthz: 200': (r) => r.status === 200 });
  check(http.get(`${HTTP_BASE}/readyz`), { '/readyz: 200 (the router can serve)': (r) => r.status === 200 });
  check(http.get(`${HTTP_BASE}/metrics`), {
    '/metrics: Prometheus text with the embedded nodes\' series': (r) => r.status === 200 && r.body.includes('shoal_node_keys'),
  });
  const topo = await call('SHOAL TOPOLOGY', () => client.sendCommand('SHOAL', 'TOPOLOGY'));
  check(topo, { 'SHOAL TOPOLOGY: a version and nodes': (t) => typeof t === 'string' && /^version=\d+ nodes=\d+/.test(t) });
}

export async function teardown(data) {
  await verifySeeds(data);
}

// Settings the other scripts read must not leak in from the caller's environment unnoticed.
if (env('SCENARIOS', '') !== '') throw new Error('smoke.js runs a fixed set of scenarios; unset SCENARIOS');
