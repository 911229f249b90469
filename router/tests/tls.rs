//! Client TLS with real clients: RESP over TLS (`--tls-port`) with redis-cli (OpenSSL), redis-py
//! (`ssl=True`) and the `redis` crate (rustls); HTTPS (`--https`) with curl. Certificates are made
//! fresh for each test by `wire/testdata/certs.sh` (the openssl tool): a CA, server and client
//! certificates, an expired one, one from a CA nobody trusts, and a second CA for rotation.

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use shoal_router::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn new() -> Certs {
        let dir = tempfile::tempdir().unwrap();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../wire/testdata/certs.sh");
        let out = Command::new("bash").arg(script).arg(dir.path()).output().expect("bash runs");
        assert!(
            out.status.success(),
            "certs.sh failed (is openssl installed?): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Certs { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

/// A one-node embedded router serving RESP over TLS with `server.crt`, trusting `ca.crt` for
/// client certificates.
async fn tls_router(certs: &Certs, extra: &[&str]) -> Router {
    let (cert, key, ca) = (certs.path("server.crt"), certs.path("server.key"), certs.path("ca.crt"));
    let mut args = vec![
        "--embedded-nodes",
        "1",
        "--tls-port",
        "127.0.0.1:0",
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
    ];
    args.extend_from_slice(extra);
    support::router(&args).await
}

/// What redis-cli printed, and whether it exited successfully.
struct CliRun {
    ok: bool,
    out: String,
}

/// redis-cli --tls against `addr`, trusting `cacert`, with `tls` options (client certificate),
/// running `command`.
fn redis_cli(addr: SocketAddr, cacert: &str, tls: &[&str], command: &[&str]) -> CliRun {
    let out = Command::new("redis-cli")
        .args(["--tls", "--cacert", cacert, "-h", "127.0.0.1", "-p", &addr.port().to_string()])
        .args(tls)
        .args(command)
        .output()
        .expect("redis-cli installed");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    CliRun {
        ok: out.status.success() && !text.contains("Error") && !text.contains("Could not connect"),
        out: text,
    }
}

async fn cli(addr: SocketAddr, cacert: String, tls: Vec<String>, command: Vec<&'static str>) -> CliRun {
    tokio::task::spawn_blocking(move || {
        let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
        redis_cli(addr, &cacert, &tls, &command)
    })
    .await
    .unwrap()
}

fn cert_args(certs: &Certs, name: &str) -> Vec<String> {
    vec![
        "--cert".into(),
        certs.path(&format!("{name}.crt")),
        "--key".into(),
        certs.path(&format!("{name}.key")),
    ]
}

async fn handshake_failures(router: &Router) -> f64 {
    let page = shoal_router::scrape::render(&router.state).await;
    support::metric_sum(&page, "shoal_router_tls_handshake_failures_total")
}

/// Whether the router's count of refused handshakes reaches `n` within 5 s.
async fn failures_reach(router: &Router, n: f64) -> bool {
    let start = std::time::Instant::now();
    while handshake_failures(router).await < n {
        if start.elapsed() > std::time::Duration::from_secs(5) {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_over_tls_with_and_without_client_certificates() {
    let certs = Certs::new();
    let ca = certs.path("ca.crt");

    // tls-auth-clients optional: a client may come without a certificate; one that presents a
    // certificate must present a valid one.
    let router = tls_router(&certs, &["--tls-auth-clients", "optional"]).await;
    let tls = router.tls_addr.expect("a TLS listener");
    let set = cli(tls, ca.clone(), vec![], vec!["SET", "tls:k", "over tls"]).await;
    assert!(set.ok && set.out.trim() == "OK", "no client certificate: {}", set.out);
    let get = cli(tls, ca.clone(), cert_args(&certs, "client"), vec!["GET", "tls:k"]).await;
    assert!(get.ok && get.out.trim() == "over tls", "with a client certificate: {}", get.out);
    // The same data is on the plaintext port: one router, two listeners.
    let mut plain = support::Raw::connect(router.resp_addr()).await;
    assert_eq!(plain.cmd(&["GET", "tls:k"]).await, b"$8\r\nover tls\r\n");
    for bad in ["rogue", "expired"] {
        let run = cli(tls, ca.clone(), cert_args(&certs, bad), vec!["PING"]).await;
        assert!(
            !run.ok && !run.out.contains("PONG"),
            "a {bad} client certificate must be refused: {}",
            run.out
        );
    }
    // The client does not trust the router's certificate: redis-cli says why.
    let run = cli(tls, certs.path("other-ca.crt"), vec![], vec!["PING"]).await;
    assert!(!run.ok && run.out.contains("certificate verify failed"), "{}", run.out);
    // The router counts a refused handshake when its side of it ends, which may be a moment
    // after redis-cli exits: wait for the count (bounded).
    assert!(failures_reach(&router, 3.0).await, "refused handshakes are counted");
    router.shutdown().await;

    // tls-auth-clients yes (Redis's default): a certificate is required.
    let router = tls_router(&certs, &[]).await;
    let tls = router.tls_addr.unwrap();
    let run = cli(tls, ca.clone(), vec![], vec!["PING"]).await;
    assert!(!run.ok && !run.out.contains("PONG"), "no client certificate must be refused: {}", run.out);
    let run = cli(tls, ca.clone(), cert_args(&certs, "client"), vec!["PING"]).await;
    assert!(run.ok && run.out.trim() == "PONG", "{}", run.out);
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_crate_and_redis_py_connect_over_tls() {
    let certs = Certs::new();
    let router = tls_router(&certs, &["--requirepass", "tls-pass"]).await;
    let tls = router.tls_addr.unwrap();

    // The redis crate (rustls), with a client certificate, as a TLS-only application would.
    let read = |name: &str| std::fs::read(certs.path(name)).unwrap();
    let client = redis::Client::build_with_tls(
        format!("rediss://:tls-pass@localhost:{}/", tls.port()),
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: read("client.crt"),
                client_key: read("client.key"),
            }),
            root_cert: Some(read("ca.crt")),
        },
    )
    .unwrap();
    let mut conn =
        client.get_multiplexed_async_connection().await.expect("the redis crate connects over TLS");
    let () = redis::cmd("SET").arg("tls:crate").arg("rustls").query_async(&mut conn).await.unwrap();
    let got: String = redis::cmd("GET").arg("tls:crate").query_async(&mut conn).await.unwrap();
    assert_eq!(got, "rustls");
    let big = "v".repeat(300_000); // larger than a TLS record: many records each way
    let () = redis::cmd("SET").arg("tls:big").arg(&big).query_async(&mut conn).await.unwrap();
    let back: String = redis::cmd("GET").arg("tls:big").query_async(&mut conn).await.unwrap();
    assert_eq!(back.len(), big.len());

    // redis-py with ssl=True.
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/redis_py_tls.py");
    let args =
        [tls.port().to_string(), certs.path("ca.crt"), certs.path("client.crt"), certs.path("client.key")];
    let out =
        tokio::task::spawn_blocking(move || Command::new("python3").arg(script).args(args).output().unwrap())
            .await
            .unwrap();
    assert!(
        out.status.success(),
        "redis-py over TLS failed\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let got: String = redis::cmd("GET").arg("py:tls").query_async(&mut conn).await.unwrap();
    assert_eq!(got, "from python", "redis-py's write is visible to other TLS clients");
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_reaches_new_connections_while_open_ones_stay_up() {
    let certs = Certs::new();
    // The router serves copies, which the test replaces as cert-manager would.
    let live = tempfile::tempdir().unwrap();
    let (cert, key) = (live.path().join("tls.crt"), live.path().join("tls.key"));
    std::fs::copy(certs.path("server.crt"), &cert).unwrap();
    std::fs::copy(certs.path("server.key"), &key).unwrap();
    let (cert_s, key_s, ca) = (cert.display().to_string(), key.display().to_string(), certs.path("ca.crt"));
    let router = support::router(&[
        "--embedded-nodes",
        "1",
        "--tls-port",
        "127.0.0.1:0",
        "--tls-cert-file",
        &cert_s,
        "--tls-key-file",
        &key_s,
        "--tls-ca-cert-file",
        &ca,
    ])
    .await;
    let tls = router.tls_addr.unwrap();
    let mut open = support::tls_raw(
        tls,
        &certs.path("ca.crt"),
        Some((&certs.path("client.crt"), &certs.path("client.key"))),
    )
    .await;
    assert_eq!(open.cmd(&["SET", "rot:k", "before"]).await, b"+OK\r\n");
    let client = cert_args(&certs, "client");
    assert!(!cli(tls, certs.path("ca2.crt"), client.clone(), vec!["PING"]).await.ok, "not yet signed by ca2");

    // A half-written rotation (a key that does not match the certificate) is not served.
    std::fs::copy(certs.path("server2.crt"), &cert).unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let run = cli(tls, ca.clone(), client.clone(), vec!["PING"]).await;
    assert!(run.ok, "a certificate without its key is not used; the old pair still serves: {}", run.out);

    std::fs::copy(certs.path("server2.key"), &key).unwrap();
    let started = Instant::now();
    loop {
        let run = cli(tls, certs.path("ca2.crt"), client.clone(), vec!["PING"]).await;
        if run.ok && run.out.trim() == "PONG" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the new certificate is served within seconds: {}",
            run.out
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let run = cli(tls, ca.clone(), client, vec!["PING"]).await;
    assert!(!run.ok, "new connections get the new certificate only: {}", run.out);
    // The connection opened before the rotation is still up and working.
    assert_eq!(open.cmd(&["GET", "rot:k"]).await, b"$6\r\nbefore\r\n");
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_or_plaintext_clients_on_the_tls_port_are_cut_off_without_harming_others() {
    let certs = Certs::new();
    let router = tls_router(&certs, &["--tls-auth-clients", "no", "--tls-handshake-timeout-ms", "300"]).await;
    let tls = router.tls_addr.unwrap();
    // Connects and says nothing: disconnected after the handshake timeout.
    let mut silent = TcpStream::connect(tls).await.unwrap();
    // Speaks plaintext RESP to the TLS port: no reply, disconnected.
    let mut plain = TcpStream::connect(tls).await.unwrap();
    plain.write_all(b"PING\r\n").await.unwrap();
    // A TLS client meanwhile is served.
    let mut good = support::tls_raw(tls, &certs.path("ca.crt"), None).await;
    assert_eq!(good.cmd(&["PING"]).await, b"+PONG\r\n");
    for (what, s) in [("silent", &mut silent), ("plaintext", &mut plain)] {
        let started = Instant::now();
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut buf)).await;
        assert!(read.is_ok(), "{what}: the router closes the connection");
        assert!(!buf.windows(4).any(|w| w == b"PONG"), "{what}: no reply in plaintext");
        assert!(started.elapsed() < Duration::from_secs(2), "{what}: within the handshake timeout");
    }
    assert!(failures_reach(&router, 2.0).await, "refused handshakes are counted");
    assert_eq!(good.cmd(&["PING"]).await, b"+PONG\r\n", "the TLS client is unaffected");
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_api_with_plaintext_ports_off_and_metrics_on_their_own_address() {
    let certs = Certs::new();
    let router = tls_router(
        &certs,
        &[
            "--tls-auth-clients",
            "no",
            "--https",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
            "--resp",
            "off",
            "--http",
            "off",
        ],
    )
    .await;
    let https = router.https_addr.expect("an HTTPS listener");
    let ca = certs.path("ca.crt");
    let curl = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let out = Command::new("curl")
                .args(["-s", "-S", "--max-time", "5"])
                .args(&args)
                .output()
                .expect("curl");
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
    };
    let url = format!("https://localhost:{}/keys/web", https.port());
    let (ok, _, err) = curl(vec![
        "--cacert".into(),
        ca.clone(),
        "-X".into(),
        "PUT".into(),
        "--data-binary".into(),
        "over https".into(),
        url.clone(),
    ])
    .await
    .unwrap();
    assert!(ok, "{err}");
    let (ok, body, err) = curl(vec!["--cacert".into(), ca.clone(), url.clone()]).await.unwrap();
    assert!(ok && body == "over https", "{body} {err}");
    // Without trusting the CA, curl refuses the router's certificate.
    let (ok, _, err) = curl(vec!["--cacert".into(), certs.path("other-ca.crt"), url.clone()]).await.unwrap();
    assert!(!ok && err.contains("certificate"), "{err}");
    // Plain HTTP to the HTTPS port gets no answer.
    let (ok, body, _) = curl(vec![url.replace("https://", "http://")]).await.unwrap();
    assert!(!ok && !body.contains("over https"));
    // The plaintext listeners are off; RESP over TLS still serves the same data.
    let mut resp = support::tls_raw(router.tls_addr.unwrap(), &ca, None).await;
    assert_eq!(resp.cmd(&["GET", "web"]).await, b"$10\r\nover https\r\n");

    // --metrics-addr serves the ops endpoints only.
    let metrics = router.metrics_addr.expect("a metrics listener");
    let page = support::http_get(metrics, "/metrics").await;
    assert!(page.starts_with("HTTP/1.1 200") && page.contains("shoal_router_commands_total"), "{page}");
    assert!(support::http_get(metrics, "/readyz").await.starts_with("HTTP/1.1 200"));
    assert!(support::http_get(metrics, "/keys/web").await.starts_with("HTTP/1.1 404"), "no API there");
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_reaches_its_nodes_over_mutual_tls() {
    use shoal_node::server::{NodeHandle, ServeOptions};
    use shoal_node::store::{Store, StoreConfig, SystemClock};
    let certs = Certs::new();
    let files = |name: &str| shoal_wire::tls::TlsFiles {
        cert: certs.dir.path().join(format!("{name}.crt")),
        key: certs.dir.path().join(format!("{name}.key")),
        ca: Some(certs.dir.path().join("ca.crt")),
    };
    let mut nodes = Vec::new();
    for _ in 0..2 {
        let store = std::sync::Arc::new(Store::new(StoreConfig::default(), std::sync::Arc::new(SystemClock)));
        let link_tls = Some(shoal_wire::tls::LinkTls::load(&files("node")).unwrap());
        let options = ServeOptions { link_tls, ..Default::default() };
        nodes.push(NodeHandle::start("127.0.0.1:0".parse().unwrap(), store, options).await.unwrap());
    }
    let list = nodes.iter().map(|n| n.addr.to_string()).collect::<Vec<_>>().join(",");
    let (cert, key, ca) = (certs.path("client.crt"), certs.path("client.key"), certs.path("ca.crt"));
    let router = support::router(&[
        "--nodes",
        &list,
        "--link-tls-cert-file",
        &cert,
        "--link-tls-key-file",
        &key,
        "--link-tls-ca-file",
        &ca,
    ])
    .await;
    let mut c = support::Raw::connect(router.resp_addr()).await;
    for i in 0..50 {
        let k = format!("mtls:{i}");
        assert_eq!(c.cmd(&["SET", &k, &k]).await, b"+OK\r\n");
    }
    assert!(nodes.iter().all(|n| !n.state.store.is_empty()), "keys on both nodes, written over mutual TLS");
    assert_eq!(c.cmd(&["GET", "mtls:7"]).await, b"$6\r\nmtls:7\r\n");
    router.shutdown().await;
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_authentication_limits_hold_on_the_tls_port() {
    let certs = Certs::new();
    let router = tls_router(&certs, &["--tls-auth-clients", "no", "--requirepass", "s3cret"]).await;
    let (tls, ca) = (router.tls_addr.unwrap(), certs.path("ca.crt"));
    // The same limits and texts as on the plaintext port, before any allocation they bound.
    let cases: [(&[u8], &[u8]); 3] = [
        (b"*11\r\n", b"-ERR Protocol error: unauthenticated multibulk length\r\n"),
        (b"*2\r\n$4\r\nAUTH\r\n$20000\r\n", b"-ERR Protocol error: unauthenticated bulk length\r\n"),
        (&[b'a'; 70 * 1024], b"-ERR Protocol error: too big inline request\r\n"),
    ];
    for (sent, answer) in cases {
        let mut c = support::tls_raw(tls, &ca, None).await;
        c.send(sent).await;
        assert_eq!(c.until_close().await, answer);
    }
    let mut c = support::tls_raw(tls, &ca, None).await;
    assert_eq!(c.cmd(&["GET", "k"]).await, b"-NOAUTH Authentication required.\r\n");
    assert_eq!(c.cmd(&["AUTH", "s3cret"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&["SET", "k", "v"]).await, b"+OK\r\n");
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_command_speaks_tls() {
    let certs = Certs::new();
    let router = tls_router(&certs, &[]).await;
    let addr = format!("localhost:{}", router.tls_addr.unwrap().port());
    let run = |ca: String, client: bool| {
        let (addr, cert, key) = (addr.clone(), certs.path("client.crt"), certs.path("client.key"));
        tokio::task::spawn_blocking(move || {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal-router"));
            cmd.args(["check", "--addr", &addr, "--timeout-secs", "2", "--tls-ca-cert-file", &ca]);
            if client {
                cmd.args(["--tls-cert-file", &cert, "--tls-key-file", &key]);
            }
            let out = cmd.env_remove("SHOAL_REQUIREPASS").output().unwrap();
            (
                out.status.success(),
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
            )
        })
    };
    let (ok, out) = run(certs.path("ca.crt"), true).await.unwrap();
    assert!(ok && out.contains("ok   TLS handshake") && out.contains("ok   MSET/MGET"), "{out}");
    let (ok, out) = run(certs.path("ca.crt"), false).await.unwrap();
    assert!(!ok, "tls-auth-clients yes: a certificate is needed: {out}");
    let (ok, out) = run(certs.path("other-ca.crt"), true).await.unwrap();
    assert!(!ok && out.contains("TLS handshake"), "{out}");
    router.shutdown().await;
}
