package upsert

import "time"

// The article's algorithm in the simulation, as cmd/upsertbench writes it:
// batches of 100 sent by a pool of 4 workers; 429s retried up to 8 times,
// timeouts and 5xx up to 4 times, after a full-jitter backoff of
// 250 ms·2^n (n the retries so far, at most 30 s); a batch that timed out
// is split in halves sent one after the other; each 429 takes one worker
// off the pool (down to one); other errors are not retried, and records
// whose retries run out are dropped.

type articleWork struct {
	n                      int
	rateLimited, transient int
}

type articleWorker struct {
	id    int
	stack []articleWork
}

// runArticle writes the run of ix with the article's algorithm.
func runArticle(ix simIndex, seed uint64) simResult {
	s := newSim(ix, seed)
	workers := 4
	var next func(w *articleWorker)
	var send func(w *articleWorker)
	next = func(w *articleWorker) {
		if len(w.stack) == 0 {
			if w.id >= workers || s.pending == 0 {
				return
			}
			n := min(100, s.pending)
			s.pending -= n
			w.stack = append(w.stack, articleWork{n: n})
		}
		send(w)
	}
	send = func(w *articleWorker) {
		top := w.stack[len(w.stack)-1]
		s.res.requests++
		done := func(e *Error) {
			w.stack = w.stack[:len(w.stack)-1]
			if e == nil {
				s.res.landed += top.n
				s.checkDone()
				next(w)
				return
			}
			var retry bool
			switch e.Class {
			case ClassRateLimited:
				retry = top.rateLimited < 8
				top.rateLimited++
				workers = max(1, workers-1)
			case ClassTimeout:
				s.res.timeouts++
				retry = top.transient < 4
				top.transient++
				if retry && top.n > 1 {
					half := top.n / 2
					w.stack = append(w.stack, articleWork{top.n - half, top.rateLimited, top.transient}, articleWork{half, top.rateLimited, top.transient})
					next(w)
					return
				}
			case ClassServer:
				retry = top.transient < 4
				top.transient++
			default:
				retry = false
			}
			if !retry {
				s.res.failed += top.n
				s.checkDone()
				next(w)
				return
			}
			w.stack = append(w.stack, top)
			n := top.rateLimited + top.transient - 1
			ceil := 30 * time.Second
			if n < 20 {
				ceil = min(ceil, 250*time.Millisecond<<n)
			}
			s.at(s.clk.now.Add(time.Duration(s.rng.Int64N(int64(ceil)+1))), func() { send(w) })
		}
		sent, bytes := s.clk.now, top.n*ix.recordBytes+20
		s.at(sent.Add(simWire(top.n, bytes)), func() { s.idx.arrive(top.n, bytes, sent, done) })
	}
	for i := range 4 {
		next(&articleWorker{id: i})
	}
	return s.loop()
}

func (s *sim) checkDone() {
	if s.done() {
		s.q = s.q[:0]
	}
}
