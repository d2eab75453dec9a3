package upsert

import (
	"context"
	"errors"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// PushbackDialOption returns a gRPC dial option that makes the index's
// pushback visible to the retry loop: when a call fails and the response
// header or trailer carries "retry-after" (seconds or an HTTP date) or
// "grpc-retry-pushback-ms", the error gains a RetryAfter() method and the
// library waits at least that long before retrying (up to a minute: a
// longer ask waits a minute, as an HTTP Retry-After does). Pass it to
// [pinecone.Client.Index]:
//
//	idx, err := pc.Index(pinecone.NewIndexConnParams{Host: host}, upsert.PushbackDialOption())
//
// The SDK gives no other way to read gRPC metadata. Without the option,
// retries use the backoff alone.
func PushbackDialOption() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(pushbackInterceptor)
}

func pushbackInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var header, trailer metadata.MD
	opts = append(opts, grpc.Header(&header), grpc.Trailer(&trailer))
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil {
		return nil
	}
	if d := pushbackOf(header, trailer); d > 0 {
		return &pushbackError{err: err, after: d}
	}
	return err
}

func pushbackOf(mds ...metadata.MD) time.Duration {
	now := time.Now()
	for _, md := range mds {
		if v := md.Get("grpc-retry-pushback-ms"); len(v) > 0 {
			// An ask beyond int64 parses as its bound, with ErrRange: the
			// longest wait, not none.
			if ms, err := strconv.ParseInt(v[0], 10, 64); (err == nil || errors.Is(err, strconv.ErrRange)) && ms > 0 {
				// Bounded before the conversion, which would overflow.
				return serverWait(time.Duration(min(ms, maxServerWait.Milliseconds())) * time.Millisecond)
			}
		}
		if v := md.Get("retry-after"); len(v) > 0 {
			if d := parseRetryAfter(v[0], now); d > 0 {
				return d
			}
		}
	}
	return 0
}

// pushbackError is a failed call with the wait the server asked for.
type pushbackError struct {
	err   error
	after time.Duration
}

func (e *pushbackError) Error() string { return e.err.Error() }

func (e *pushbackError) Unwrap() error { return e.err }

// RetryAfter returns the wait the server asked for.
func (e *pushbackError) RetryAfter() time.Duration { return e.after }
