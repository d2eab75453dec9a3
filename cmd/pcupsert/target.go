package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upserttest"
)

// target is the index the records go to.
type target struct {
	idx  *pinecone.IndexConnection
	host string
	srv  *upserttest.Server // the embedded index, or nil for a real one
}

// settledAt returns where the run writes, as a checkpoint names it.
func (t *target) settledAt() checkpointTarget {
	host := embeddedHost
	if t.srv == nil {
		host = canonicalHost(t.host)
	}
	return checkpointTarget{host: host, namespace: namespaceName(t.idx.Namespace())}
}

// plannedTarget returns where a run of the options would write, for a
// dry run, which opens no index: the host of --host (checked by
// checkTarget), none for --index (known only once looked up), or the
// embedded index.
func plannedTarget(o options) checkpointTarget {
	t := checkpointTarget{host: embeddedHost, namespace: namespaceName(o.namespace)}
	switch {
	case o.index != "":
		t.host = ""
	case o.host != "":
		host, _ := checkHost(o.host, "--host")
		t.host = canonicalHost(host)
	}
	return t
}

// describeTimeout bounds the lookup of an index's host by name.
const describeTimeout = 30 * time.Second

// openTarget connects to the index the options name, or starts the
// embedded one when no API key or no index is given, and says so on con.
// It makes the checks of checkTarget first, and checks the host that
// --index looks up as checkHost does --host's.
func openTarget(ctx context.Context, o options, key string, con io.Writer) (*target, error) {
	if err := checkTarget(o, key); err != nil {
		return nil, err
	}
	if o.host == "" && o.index == "" {
		return openEmbedded(o, con)
	}
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: key, SourceTag: "pcupsert"})
	if err != nil {
		return nil, err
	}
	host, named := o.host, "--host"
	if o.index != "" {
		dctx, cancel := context.WithTimeout(ctx, describeTimeout)
		desc, err := pc.DescribeIndex(dctx, o.index)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("looking up index %q: %w", o.index, err)
		}
		host, named = desc.Host, fmt.Sprintf("--index %q: its host", o.index)
	}
	host, err = checkHost(host, named)
	if err != nil {
		return nil, err
	}
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: host, Namespace: o.namespace}, upsert.PushbackDialOption())
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(con, "pcupsert: writing to %s, namespace %q\n", host, idx.Namespace())
	return &target{idx: idx, host: host}, nil
}

// checkTarget makes the checks of the index the options name that need
// no network, and returns a *usageError for a command line openTarget
// would refuse: --host or --index without the API key, --fault, --rate or
// --dimension (the embedded index's) with either, or a --host that
// checkHost refuses. A dry run, which opens no index, makes them too, so
// that it refuses what a run refuses, but takes --dimension with a host:
// it is what the dry run checks records against. The host that --index
// names is known only once looked up, by openTarget.
func checkTarget(o options, key string) error {
	switch {
	case o.host == "" && o.index == "":
		return nil
	case key == "":
		return usagef("--host and --index need the API key in PINECONE_API_KEY")
	case o.dryRun && (o.fault != "" || o.rate != 0):
		return usagef("--fault and --rate apply to the embedded index only, not with --host or --index")
	case !o.dryRun && (o.fault != "" || o.rate != 0 || o.dimension != 0):
		return usagef("--fault, --rate and --dimension apply to the embedded index only, not with --host or --index")
	case o.host != "":
		_, err := checkHost(o.host, "--host")
		return err
	}
	return nil
}

// openEmbedded starts the embedded loopback index with the options' faults
// and rate, and connects to it through the Pinecone SDK.
func openEmbedded(o options, con io.Writer) (*target, error) {
	faults, err := parseFaults(o.fault, o.timeout)
	if err != nil {
		return nil, usagef("--fault: %v", err)
	}
	// The embedded index takes any key: never hand it the real one.
	pc, err := pinecone.NewClient(pinecone.NewClientParams{ApiKey: "pcupsert-embedded"})
	if err != nil {
		return nil, err
	}
	// Without --dimension, the index takes the dimension of the first
	// record stored, which is the first valid one: the library rejects
	// the records that do not share it before sending them.
	srv := upserttest.NewServer(upserttest.WithFaults(faults), upserttest.WithRate(o.rate, 0), upserttest.WithDimension(o.dimension))
	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: srv.Host(), Namespace: o.namespace}, upsert.PushbackDialOption())
	if err != nil {
		srv.Close()
		return nil, err
	}
	fmt.Fprintf(con, "pcupsert: no PINECONE_API_KEY/--host: writing to an embedded loopback index at %s\n", srv.Host())
	return &target{idx: idx, host: srv.Host(), srv: srv}, nil
}

// Close closes the connection and stops the embedded index.
func (t *target) Close() {
	t.idx.Close()
	if t.srv != nil {
		t.srv.Close()
	}
}

// checkHost returns host in the form the SDK takes, or a *usageError
// naming it by named (--host, or the --index it was looked up for) if the
// SDK could not dial it: pinecone.Client.Index ends the program
// (log.Fatalf) when its gRPC client cannot be created. Plain http is
// refused but for a loopback host (isLoopback): the SDK dials it without
// TLS, and the API key it sends with every request would cross the
// network unencrypted.
func checkHost(host, named string) (string, error) {
	shown := fmt.Sprintf("%q", host)
	if strings.ContainsAny(host, "@?#") {
		shown = "with credentials, a query or a fragment" // not echoed: it may hold a password or a key
	}
	bad := usagef("%s %s: want an index host such as https://NAME-PROJECT.svc.REGION.pinecone.io", named, shown)
	s := host
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") ||
		strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.User != nil {
		return "", bad
	}
	if u.Scheme == "http" && !isLoopback(u.Hostname()) {
		return "", usagef("%s %s: plain http is for a loopback host only (localhost, 127.0.0.1, [::1]), "+
			"as the embedded index or Pinecone Local: elsewhere the API key would cross the network unencrypted; use https://", named, shown)
	}
	// The same dial target and options as the SDK: this must succeed.
	cc, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", bad
	}
	cc.Close()
	return u.Scheme + "://" + u.Host, nil
}

// isLoopback reports whether host, a URL's host name (without its port or
// brackets), is on the loopback interface: localhost (in any case, with
// or without its final dot) or a loopback IP address (127.0.0.0/8, ::1,
// either mapped, with a zone or not). No name is looked up: another name
// that resolves to loopback, or could be made to, is not taken for one.
func isLoopback(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && addr.IsLoopback()
}

// maxFaultTimeout is the longest --timeout that --fault timeout=P takes:
// it answers a tenth after the timeout, and past about 2,330,000h that sum
// overflows time.Duration (upserttest.AmbiguousTimeouts panics on the
// negative delay). A round bound well below, 114 years.
const maxFaultTimeout = 1_000_000 * time.Hour

// faultHelp describes --fault.
const faultHelp = `  429=P      answer 429 (RESOURCE_EXHAUSTED) to a share P (0 to 1) of requests
  500=P, 503=P, 504=P   answer that status (INTERNAL, UNAVAILABLE, DEADLINE_EXCEEDED)
  timeout=P  write a share P of requests but answer after --timeout, so that
             the client times out on a write that landed (try --timeout 1s)
  reset=P    reset the connection instead of answering, writing nothing
  partial=P  write the first half of a request and answer 500
  reject=ID1|ID2|...   reject (400, INVALID_ARGUMENT) every request holding one of the ids
e.g. 429=0.05,503=0.02,timeout=0.01,reject=id1|id2 (which requests fail is
the same from run to run)`

// statusCodes maps the HTTP statuses --fault takes to the gRPC codes
// Pinecone answers with.
var statusCodes = map[string]codes.Code{
	"429": codes.ResourceExhausted,
	"500": codes.Internal,
	"503": codes.Unavailable,
	"504": codes.DeadlineExceeded,
}

// parseFaults turns a --fault list into a fault script of the embedded
// index; "" is no faults. timeout is the per-request timeout, which
// timeout=P outlasts.
func parseFaults(spec string, timeout time.Duration) (upserttest.FaultFunc, error) {
	if spec == "" {
		return nil, nil
	}
	var fs []upserttest.FaultFunc
	for i, item := range strings.Split(spec, ",") {
		kind, arg, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || arg == "" {
			return nil, fmt.Errorf("%q: want KIND=VALUE, such as 429=0.05", item)
		}
		if kind == "reject" {
			fs = append(fs, upserttest.RejectIDs(strings.Split(arg, "|")...))
			continue
		}
		p, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(p >= 0 && p <= 1) {
			return nil, fmt.Errorf("%q: want a share from 0 to 1", item)
		}
		seed := int64(i + 1) // a different draw per item, the same every run
		switch kind {
		case "timeout":
			if timeout > maxFaultTimeout {
				return nil, fmt.Errorf("%q: --timeout %v is too long: this fault answers a tenth after it, and takes a --timeout of %v at most",
					item, timeout, maxFaultTimeout)
			}
			fs = append(fs, upserttest.AmbiguousTimeouts(p, timeout+timeout/10, seed))
		case "reset":
			fs = append(fs, upserttest.ConnectionResets(p, seed))
		case "partial":
			fs = append(fs, upserttest.PartialWrites(p, seed))
		default:
			code, ok := statusCodes[kind]
			if !ok {
				return nil, fmt.Errorf("%q: unknown fault %q; want 429, 500, 503, 504, timeout, reset, partial or reject", item, kind)
			}
			fs = append(fs, upserttest.ErrorRate(code, p, seed))
		}
	}
	return upserttest.Chain(fs...), nil
}
