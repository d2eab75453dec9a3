package upserttest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"time"
)

// certValidity is how long the certificate of a Server is valid, from an
// hour before NewServer (to tolerate clock skew) to a day after it.
const certValidity = 24 * time.Hour

// newCertificate generates a self-signed ECDSA P-256 certificate for
// 127.0.0.1, ::1 and localhost, as NewServer needs for its HTTPS endpoint.
func newCertificate() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"upserttest"}, CommonName: "upserttest"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // its own root, as with httptest
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// newTLS builds the server's TLS configuration and the client that trusts
// it. The server offers HTTP/1.1 only.
func newTLS() (*tls.Config, *x509.Certificate, *http.Client) {
	cert, err := newCertificate()
	if err != nil {
		panic(fmt.Sprintf("upserttest: failed to generate a certificate: %v", err))
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
	}}
	return cfg, cert.Leaf, client
}

// httpErrorLog is the ErrorLog of the HTTPS servers: it drops the TLS
// handshake errors of connections that a Restart or Close cut, or whose
// client does not trust the certificate, and passes the rest on to the
// standard logger.
var httpErrorLog = log.New(errorLogFilter{}, "", 0)

type errorLogFilter struct{}

func (errorLogFilter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("TLS handshake error")) {
		return len(p), nil
	}
	log.Print(string(p))
	return len(p), nil
}
