#!/usr/bin/env bash
# Test certificates, made fresh by each test run with the openssl command-line tool (router and
# node tests share it):
#   certs.sh DIR
# DIR/ca.{crt,key}          the CA the router trusts for client certificates and clients trust
# DIR/server.{crt,key}      the router's certificate (localhost, 127.0.0.1), signed by ca
# DIR/client.{crt,key}      a client certificate signed by ca
# DIR/expired.{crt,key}     a client certificate signed by ca that expired in 2020
# DIR/other-ca.{crt,key}    a CA nobody trusts; DIR/rogue.{crt,key} a client certificate it signed
# DIR/ca2.{crt,key}, DIR/server2.{crt,key}   a second CA and server certificate (rotation)
# DIR/node.{crt,key}        a node-link certificate signed by ca, for server and client use
set -euo pipefail
dir="$1"
mkdir -p "$dir"
cd "$dir"
q() { openssl "$@" 2>/dev/null; }
ca() { # name subject
  q req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" -out "$1.crt" \
    -days 30 -subj "/CN=$2" -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
leaf() { # name ca usage [openssl ca dates...]
  local name="$1" ca="$2" usage="$3"
  shift 3
  q req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$name.key" -out "$name.csr" -subj "/CN=$name"
  cat > "$name.ext" <<EXT
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=$usage
subjectAltName=DNS:localhost,IP:127.0.0.1
EXT
  if [ "$#" -gt 0 ]; then
    # Explicit validity dates need `openssl ca` (x509 -req only counts days from now).
    mkdir -p "db-$ca"
    : > "db-$ca/index.txt"
    printf '1000\n' > "db-$ca/serial"
    cat > "db-$ca/ca.cnf" <<CNF
[ca]
default_ca = d
[d]
database = db-$ca/index.txt
serial = db-$ca/serial
new_certs_dir = db-$ca
certificate = $ca.crt
private_key = $ca.key
default_md = sha256
policy = p
copy_extensions = none
[p]
commonName = supplied
CNF
    q ca -batch -config "db-$ca/ca.cnf" -in "$name.csr" -out "$name.crt" -extfile "$name.ext" -notext "$@"
  else
    q x509 -req -in "$name.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -days 30 -sha256 \
      -extfile "$name.ext" -out "$name.crt"
  fi
  rm -f "$name.csr" "$name.ext"
}
ca ca "Shoal test CA"
ca other-ca "Untrusted CA"
ca ca2 "Shoal test CA 2"
leaf server ca serverAuth
leaf server2 ca2 serverAuth
leaf client ca clientAuth
leaf node ca serverAuth,clientAuth
leaf rogue other-ca clientAuth
leaf expired ca clientAuth -startdate 20200101000000Z -enddate 20200102000000Z
