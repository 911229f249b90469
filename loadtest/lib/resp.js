// RESP helpers for the k6 scripts: one client per VU, timed commands and their metrics.
//
// k6's built-in `k6/experimental/redis` (the one that works offline; `k6/x/redis` would try to
// download a k6 build) emits no metrics of its own, so every command goes through call(), which
// records `resp_cmd_duration` and `resp_failed`, both tagged with the command name.
// k6 prints a deprecation warning for this module at start; expected (see above).
// Its dialer is TCP only (a unix:// SHOAL_ADDR fails with "missing port"): loadtest/compare
// measures the Unix socket with redis-benchmark instead.
// Caveat: the k6 JS runtime has no sub-millisecond clock (no performance.now()), so these
// durations have 1 ms resolution; the thresholds built on them are in whole milliseconds.
import redis from 'k6/experimental/redis';
import { fail } from 'k6';
import { Rate, Trend } from 'k6/metrics';
import { RESP_ADDR, redisUrl, seedKey, valueFor } from './shoal.js';

export const cmdDuration = new Trend('resp_cmd_duration', true);
export const cmdFailed = new Rate('resp_failed');

// newClient: retries off (go-redis retries failed commands 3 times by default), so every error
// the cluster returns reaches the metrics instead of being papered over by the client.
// RESP_MAX_RETRIES=N allows N retries, which go-redis makes only for a connection that failed
// (EOF, reset, timeout) and a few Redis errors Shoal does not send (LOADING, READONLY,
// CLUSTERDOWN, TRYAGAIN), never for `ERR ...`. It is for runs in which a router pod stops: a
// router must close its connections, RESP has no way to say so in advance, and k6's client, whose
// dialer wraps the socket, cannot run go-redis's check that drops connections the server closed
// before reusing one (with the standard dialer an application's go-redis does, and most clients
// retry such a failure once).
export function newClient() {
  const url = redisUrl();
  const retries = __ENV.RESP_MAX_RETRIES || '-1';
  if (!/^(-1|[0-9]+)$/.test(retries)) {
    fail(`RESP_MAX_RETRIES must be -1 or a count, not '${retries}'`);
  }
  return new redis.Client(url + (url.includes('?') ? '&' : '?') + `max_retries=${retries}`);
}

let errorsLogged = 0;

// call(cmd, fn): awaits fn() (a client promise), timing it. A missing key (go-redis reports it
// as the error "redis: nil") is a normal answer and resolves to null. Any other error counts in
// resp_failed and resolves to undefined, so callers can tell "no value" from "no answer".
export async function call(cmd, fn) {
  const t0 = Date.now();
  const tags = { cmd };
  try {
    const v = await fn();
    cmdDuration.add(Date.now() - t0, tags);
    cmdFailed.add(false, tags);
    return v;
  } catch (e) {
    cmdDuration.add(Date.now() - t0, tags);
    if (String(e).includes('redis: nil')) {
      cmdFailed.add(false, tags);
      return null;
    }
    cmdFailed.add(true, tags);
    // The first few errors are printed with their text: a count alone does not say what broke.
    if (errorsLogged++ < 10) console.error(`${cmd} failed against ${RESP_ADDR}: ${e}`);
    return undefined;
  }
}

// seedResp: `count` keys of `size` bytes via MSET batches (seedKey(run, i) -> valueFor), so
// scenarios can read data that existed before the load began. Fails the run if it cannot.
export async function seedResp(client, run, count, size) {
  const pong = await call('PING', () => client.sendCommand('PING'));
  if (pong !== 'PONG') fail(`no PONG from ${RESP_ADDR} (got ${pong}): is the cluster up?`);
  for (let start = 0; start < count; start += 100) {
    const args = [];
    for (let i = start; i < Math.min(count, start + 100); i++) {
      const k = seedKey(run, i);
      args.push(k, valueFor(k, size));
    }
    const ok = await call('MSET', () => client.sendCommand('MSET', ...args));
    if (ok !== 'OK') fail(`seeding failed: MSET answered ${ok}`);
  }
  return { run, seeded: count, size };
}
