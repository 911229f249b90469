// Helpers shared by the k6 scripts in loadtest/. A local module on purpose: the scripts import
// nothing from URLs (no remote jslib), so they run offline and the same on every machine.
import exec from 'k6/execution';

// env(NAME, default): a setting from `k6 run -e NAME=...` (or the environment), else default.
export function env(name, def) {
  const v = __ENV[name];
  return v === undefined || v === '' ? def : v;
}

// intEnv(NAME, default): like env, but an integer; a typo fails the run at start, not silently.
export function intEnv(name, def) {
  const raw = env(name, String(def));
  const v = Number(raw);
  if (!Number.isInteger(v)) throw new Error(`${name} must be an integer, got "${raw}"`);
  return v;
}

// Endpoints. Defaults are what `cargo run --release -p shoal-router` listens on; loadtest/run
// passes the ports of the cluster it started.
export const HTTP_BASE = env('SHOAL_HTTP', 'http://127.0.0.1:8080').replace(/\/+$/, '');
export const RESP_ADDR = env('SHOAL_ADDR', '127.0.0.1:6379');

// redisUrl: SHOAL_ADDR may be host:port or a full redis:// URL (e.g. with a password).
export function redisUrl() {
  return RESP_ADDR.includes('://') ? RESP_ADDR : `redis://${RESP_ADDR}`;
}

// runId: a fresh tag per run (setup() returns it to every VU), so keys from an earlier run
// against the same cluster can never satisfy this run's checks.
export function newRunId() {
  return `${Date.now().toString(36)}${Math.floor(Math.random() * 1e6).toString(36)}`;
}

// vuPrefix: keys a VU writes are its own, so read-your-write checks cannot race with other VUs.
export function vuPrefix(run, what) {
  return `lt:${run}:${what}:vu${exec.vu.idInTest}:`;
}

export function seedKey(run, i) {
  return `lt:${run}:seed:${i}`;
}

// valueFor(key, size): a deterministic value of exactly `size` bytes (ASCII) derived from the key,
// so a reader can tell a wrong key's value, a truncated one and a stale one apart.
export function valueFor(key, size, version = 0) {
  const unit = `${key}#${version}|`;
  let v = unit.repeat(Math.ceil(size / unit.length) + 1);
  return v.substring(0, size);
}

// selected(all, defaults): the scenario names chosen with -e SCENARIOS=a,b (default: defaults).
// Unknown names fail at start with the list of known ones.
export function selected(all, defaults) {
  const names = env('SCENARIOS', defaults.join(',')).split(',').map((s) => s.trim()).filter(Boolean);
  for (const n of names) {
    if (!(n in all)) throw new Error(`unknown scenario "${n}"; known: ${Object.keys(all).join(', ')}`);
  }
  return names;
}

// pick(object, names): the entries of `object` whose keys are in `names`.
export function pick(object, names) {
  const out = {};
  for (const n of names) out[n] = object[n];
  return out;
}

// sleepMs: a non-blocking pause for async code (k6's sleep() would block the VU's event loop).
export function sleepMs(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// durationSecs('30s' | '2m' | '1h' | '500ms' | '45') -> seconds, for checking a bound up front.
export function durationSecs(s) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(String(s).trim());
  if (!m) throw new Error(`bad duration "${s}" (use e.g. 30s, 2m)`);
  const mult = { ms: 0.001, s: 1, m: 60, h: 3600 }[m[2] || 's'];
  return Number(m[1]) * mult;
}
