// k6 load test across an online reshard: constant-arrival-rate writes and reads over RESP while
// the cluster changes its node count; no client may see an error, and every read of a key whose
// write was acknowledged must return the last acknowledged value.
//
//   loadtest/run resharding                             # local cluster, scales 3 -> 5 -> 2 -> 4
//   k6 run -e SHOAL_ADDR=127.0.0.1:6379 -e SCALE_STEPS=none loadtest/resharding.js   # you scale
//
// Scenarios:
//   load   open model, RATE iterations/s for DURATION. Each iteration SETs a new key of its VU or
//          (every third) overwrites one of its earlier keys with a new version, then reads back
//          the next of its acknowledged keys in turn (so all of them get re-read, including those
//          written before a move) and one random key seeded before the load began.
//   scale  drives the reshard: for each n in SCALE_STEPS (default 5,2,4) sends `SHOAL SCALE n`
//          (the embedded cluster's online scaling) and waits until SHOAL TOPOLOGY shows n nodes,
//          no migration, scaling=no. The embedded cluster moves data unthrottled, so one pass is
//          over in about a second: after the first pass it cycles through the steps again for
//          as long as SCALE_TAIL_S of the load remain, so data keeps moving under the load and
//          the load still runs on the settled cluster at the end. With SCALE_STEPS=none it only
//          watches SHOAL TOPOLOGY and logs every version change: scale the cluster yourself
//          (e.g. `kubectl scale cachecluster/NAME --replicas=N`).
// teardown() waits for the cluster to settle, then re-reads every seeded key.
//
// Settings (-e NAME=value): SHOAL_ADDR, DURATION (60s), RATE (200), VALUE_SIZE (32), SEED_KEYS
// (20000), SCALE_STEPS (5,2,4 | none), SCALE_START (5s), SCALE_PAUSE_MS (1000), SCALE_TAIL_S (5),
// STEP_TIMEOUT_S (120), SLO_P99_MS (100), PRE_VUS (20).
import { check, fail } from 'k6';
import exec from 'k6/execution';
import { Counter, Trend } from 'k6/metrics';
import { RESP_ADDR, durationSecs, env, intEnv, newRunId, seedKey, sleepMs, valueFor, vuPrefix } from './lib/shoal.js';
import { call, newClient, seedResp } from './lib/resp.js';

const DURATION = env('DURATION', '60s');
const VALUE_SIZE = intEnv('VALUE_SIZE', 32);
const SEED_KEYS = intEnv('SEED_KEYS', 20000);
const SLO_P99_MS = intEnv('SLO_P99_MS', 100);
const STEP_TIMEOUT_S = intEnv('STEP_TIMEOUT_S', 120);
const PAUSE_MS = intEnv('SCALE_PAUSE_MS', 1000);
const TAIL_S = intEnv('SCALE_TAIL_S', 5);

// scaleSteps(): the node counts to go through, [] when the driver is off.
export function scaleSteps(def = '5,2,4') {
  const raw = env('SCALE_STEPS', def).trim();
  if (raw === '' || raw === 'none') return [];
  return raw.split(',').map((s) => {
    const n = Number(s.trim());
    if (!Number.isInteger(n) || n < 1) throw new Error(`SCALE_STEPS: "${s}" is not a node count`);
    return n;
  });
}
const STEPS = scaleSteps();

// A read of an acknowledged key that did not return its value (missing or stale): lost data.
export const ackedMismatch = new Counter('acked_read_mismatch');
export const ackedReads = new Counter('acked_reads');
export const stepsDone = new Counter('reshard_steps_done');
export const stepSeconds = new Trend('reshard_step_seconds');
export const topologyChanges = new Counter('topology_changes');

// reshardThresholds(steps, loadScenario): the SLOs of this test, shared with smoke.js.
export function reshardThresholds(steps, loadScenario = 'load') {
  const t = {
    // Zero errors: clients must not notice the reshard at all (no MOVED/ASK, no timeouts).
    resp_failed: ['rate==0'],
    // Every read of an acknowledged key returns its value: nothing is lost or rolled back by a move.
    acked_read_mismatch: ['count==0'],
    // The reads above really happened (a run that verified nothing must not pass).
    acked_reads: ['count>0'],
    // Every check passes (the reads above, and the cluster settling at the end).
    checks: ['rate==1'],
    // Moves cost latency (pulls share the CPU with clients), but a request held for long means a
    // slot was blocked; SLO_P99_MS (default 100 ms) is the bound for the whole run, moves included.
    [`resp_cmd_duration{scenario:${loadScenario}}`]: [`p(99)<${SLO_P99_MS}`],
    dropped_iterations: ['count==0'],
  };
  // When this script drives the reshard, at least one full pass of the steps must finish within
  // the run: a run in which the cluster never moved proves nothing.
  if (steps.length) t.reshard_steps_done = [`count>=${steps.length}`];
  return t;
}

export const options = {
  scenarios: {
    load: {
      executor: 'constant-arrival-rate',
      exec: 'load',
      rate: intEnv('RATE', 200),
      timeUnit: '1s',
      duration: DURATION,
      // VUs ready before the load starts: k6 drops iterations while it makes more, so a run that
      // must absorb stalls (a pod deleted, a CPU shared with other work) asks for more.
      preAllocatedVUs: intEnv('PRE_VUS', 20),
      maxVUs: 200,
    },
    scale: {
      executor: 'per-vu-iterations',
      exec: 'scale',
      vus: 1,
      iterations: 1,
      startTime: env('SCALE_START', '5s'),
      // Ends with the load at the latest, so a stuck step fails the steps-done threshold rather
      // than stretching the run.
      maxDuration: `${Math.max(1, durationSecs(DURATION) - durationSecs(env('SCALE_START', '5s')))}s`,
    },
  },
  thresholds: reshardThresholds(STEPS),
  summaryTrendStats: ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'],
};

const client = newClient();

export async function setup() {
  const data = await seedResp(client, newRunId(), SEED_KEYS, VALUE_SIZE);
  // The scenarios start right after setup: the driver starts no new step after this time.
  data.cycleUntil = Date.now() + (durationSecs(DURATION) - TAIL_S) * 1000;
  return data;
}

// This VU's acknowledged writes: key index -> version of the last acknowledged SET.
const acked = [];
let cursor = 0;

// verifyRead(key, want, got): counts a read of an acknowledged key; the first mismatches of each
// VU are logged with the key and both values (the count is in acked_read_mismatch).
let mismatchesLogged = 0;
function verifyRead(key, want, got) {
  if (got === undefined) return; // no answer (already counted in resp_failed)
  ackedReads.add(1);
  const ok = got === want;
  check(ok, { 'read of an acknowledged key returns its value': (x) => x });
  if (ok) return;
  ackedMismatch.add(1);
  if (mismatchesLogged++ < 20) {
    const shown = got === null ? 'nothing (key missing)' : `"${String(got).substring(0, 60)}"`;
    console.error(`acknowledged key ${key}: expected "${want.substring(0, 60)}", read ${shown}`);
  }
}

export async function load(data) {
  const prefix = vuPrefix(data.run, 'reshard');
  // Write: a new key, or every third iteration a new version of an earlier one (a lost update
  // during a move would then read back the older version).
  const overwrite = acked.length > 0 && exec.vu.iterationInScenario % 3 === 2;
  const i = overwrite ? Math.floor(Math.random() * acked.length) : acked.length;
  const version = overwrite ? acked[i] + 1 : 0;
  const key = `${prefix}${i}`;
  const set = await call('SET', () => client.set(key, valueFor(key, data.size, version), 0));
  if (set === 'OK') {
    acked[i] = version;
  } else if (overwrite) {
    // Unknown outcome: either version may be stored now, so this key is no longer checkable.
    // (The failure itself already breaks the zero-error threshold.)
    acked[i] = -1;
  }

  // Read back the next acknowledged key in turn, skipping uncheckable ones.
  if (acked.length) {
    cursor = (cursor + 1) % acked.length;
    if (acked[cursor] >= 0) {
      const k = `${prefix}${cursor}`;
      verifyRead(k, valueFor(k, data.size, acked[cursor]), await call('GET', () => client.get(k)));
    }
  }
  // And a key seeded before the load: these are the ones every move carries.
  const s = seedKey(data.run, Math.floor(Math.random() * data.seeded));
  verifyRead(s, valueFor(s, data.size), await call('GET', () => client.get(s)));
}

// topology(): the summary line of SHOAL TOPOLOGY as an object (version, nodes, migrations, scaling).
async function topology() {
  const text = await call('SHOAL TOPOLOGY', () => client.sendCommand('SHOAL', 'TOPOLOGY'));
  if (typeof text !== 'string') return undefined;
  const out = {};
  for (const field of text.split('\n')[0].split(' ')) {
    const [k, v] = field.split('=');
    out[k] = v;
  }
  return out;
}

// scale: drive SCALE_STEPS once, then again while time is left before data.cycleUntil (when
// set: smoke.js does not, so it makes one pass); with none, watch the topology until the end.
export async function scale(data) {
  if (!STEPS.length) return watch();
  const until = data.cycleUntil || 0;
  for (let pass = 0; pass === 0 || Date.now() < until; pass++) {
    for (const n of STEPS) {
      if (pass > 0 && Date.now() >= until) return;
      await scaleTo(n);
    }
  }
}

async function scaleTo(n) {
  const t0 = Date.now();
  const ok = await call('SHOAL SCALE', () => client.sendCommand('SHOAL', 'SCALE', String(n)));
  if (ok !== 'OK') {
    fail(`SHOAL SCALE ${n} was refused by ${RESP_ADDR} (see the error above). Against a cluster ` +
      'that is not the embedded one, run with SCALE_STEPS=none and scale it yourself.');
  }
  for (;;) {
    await sleepMs(100);
    const t = await topology();
    if (t && t.scaling && t.scaling.startsWith('failed')) fail(`scaling to ${n} failed: ${t.scaling}`);
    if (t && t.nodes === String(n) && t.migrations === '0' && t.scaling === 'no') break;
    if (Date.now() - t0 > STEP_TIMEOUT_S * 1000) fail(`scaling to ${n} did not finish within ${STEP_TIMEOUT_S}s`);
  }
  const secs = (Date.now() - t0) / 1000;
  stepSeconds.add(secs);
  stepsDone.add(1);
  console.log(`scale: ${n} nodes, settled in ${secs.toFixed(1)}s`);
  await sleepMs(PAUSE_MS); // let the load run on the new topology before the next move
}

// watch: log every topology version change until the load ends (the user moves the cluster).
async function watch() {
  const end = Date.now() + (durationSecs(DURATION) - durationSecs(env('SCALE_START', '5s'))) * 1000;
  let last = await topology();
  // The first line says the load has begun (setup is done): a driver outside k6 waits for it.
  if (last) console.log(`watching topology: version ${last.version}, ${last.nodes} nodes, ${last.migrations} migrations`);
  while (Date.now() < end - 1000) {
    await sleepMs(1000);
    const t = await topology();
    if (t && last && t.version !== last.version) {
      topologyChanges.add(1);
      console.log(`topology: version ${t.version}, ${t.nodes} nodes, ${t.migrations} migrations`);
    }
    if (t) last = t;
  }
}

// teardown: every seeded key must still hold its value on the final topology, which must be settled.
export async function teardown(data) {
  await verifySeeds(data);
}

export async function verifySeeds(data) {
  // A move may still be finishing (e.g. one started by hand): wait for it, bounded.
  let t = await topology();
  const deadline = Date.now() + STEP_TIMEOUT_S * 1000;
  while (t && (t.migrations !== '0' || t.scaling !== 'no') && Date.now() < deadline) {
    await sleepMs(200);
    t = await topology();
  }
  check(t, { 'the cluster settled (no migration, not scaling)': (x) => x && x.migrations === '0' && x.scaling === 'no' });
  for (let start = 0; start < data.seeded; start += 100) {
    const keys = [];
    for (let i = start; i < Math.min(data.seeded, start + 100); i++) keys.push(seedKey(data.run, i));
    const values = await call('MGET', () => client.mget(...keys));
    if (!Array.isArray(values)) continue;
    keys.forEach((k, i) => verifyRead(k, valueFor(k, data.size), values[i]));
  }
}
