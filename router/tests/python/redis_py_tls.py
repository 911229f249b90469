"""redis-py with ssl=True against a Shoal router's TLS port: exits non-zero on any mismatch.

    python3 redis_py_tls.py PORT CA_FILE CLIENT_CERT CLIENT_KEY
"""
import ssl
import sys

import redis


def main():
    port, ca, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    r = redis.Redis(host="localhost", port=port, password="tls-pass", ssl=True, ssl_ca_certs=ca,
                    ssl_certfile=cert, ssl_keyfile=key, decode_responses=True)
    assert r.ping() is True
    assert r.set("py:tls", "from python") is True
    assert r.get("py:tls") == "from python"
    pipe = r.pipeline(transaction=False)
    for i in range(200):
        pipe.set(f"py:tls:{i}", "x" * i)
    assert all(pipe.execute())
    assert r.mget([f"py:tls:{i}" for i in range(200)]) == ["x" * i for i in range(200)]
    # The router's certificate is checked: a client trusting nothing else refuses it.
    untrusted = redis.Redis(host="localhost", port=port, ssl=True, ssl_cert_reqs="required",
                            ssl_ca_certs=cert)
    try:
        untrusted.ping()
    except redis.exceptions.ConnectionError as e:
        assert "certificate verify failed" in str(e), e
    else:
        raise AssertionError("a client that does not trust the CA connected")
    print("redis-py over TLS: ok")


if __name__ == "__main__":
    main()
