package upserttest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/upsertlib/upsert/internal/selfsigned"
)

// certValidity is how long the certificate of a Server is valid, from an
// hour before NewServer (to tolerate clock skew) to a day after it.
const certValidity = 24 * time.Hour

// serverTLS is a Server's TLS configuration, its certificate, and a client
// that trusts it.
type serverTLS struct {
	config *tls.Config
	cert   *x509.Certificate
	client *http.Client
}

// newTLS builds the server's TLS configuration and the client that trusts
// it. The server offers HTTP/1.1 only.
func newTLS() serverTLS {
	cert, err := selfsigned.Certificate("upserttest", certValidity)
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
	return serverTLS{config: cfg, cert: cert.Leaf, client: client}
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
