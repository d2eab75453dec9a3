package upsert

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// batchScript drives a batch size controller against an index whose
// latency for n records is latency(n): it forms batches, sends them one
// after the other and answers each.
type batchScript struct {
	c       batchControl
	tn      tuning
	now     time.Time
	caps    sizeCaps
	timeout time.Duration
}

func newBatchScript() *batchScript {
	s := &batchScript{tn: defaultTuning, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), timeout: 30 * time.Second}
	s.c = newBatchControl(MaxBatchSize, &s.tn)
	s.caps = sizeCaps{records: math.Inf(1), requests: math.Inf(1)}
	return s
}

// run forms and answers n batches; class, when not nil, answers a batch
// of its size with an error class instead.
func (s *batchScript) run(n int, latency func(int) time.Duration, class func(int) Class) map[batchReason]int {
	seen := make(map[batchReason]int)
	for range n {
		size, trial := s.c.next(s.now, s.caps, true, 0.1, &s.tn)
		if trial {
			s.c.sent(s.now, size)
		}
		d := latency(size)
		cl := Class(0)
		if class != nil {
			cl = class(size)
		}
		if cl == ClassTimeout {
			d = s.timeout
		}
		s.now = s.now.Add(d)
		seen[s.c.answer(batchSample{now: s.now, records: size, latency: d, timeout: s.timeout, class: cl, trial: trial, spread: 0.1}, &s.tn)]++
	}
	return seen
}

// perRequest is an index where a request costs base plus perRecord per
// record, times slow above slowAbove records.
func perRequest(base, perRecord time.Duration, slowAbove int, slow float64) func(int) time.Duration {
	return func(n int) time.Duration {
		d := base + time.Duration(n)*perRecord
		if slowAbove > 0 && n > slowAbove {
			d = time.Duration(float64(d) * slow)
		}
		return d
	}
}

func TestBatchControl(t *testing.T) {
	t.Run("slow start tries ten times the size after the first answer, and keeps it when it costs no more per record", func(t *testing.T) {
		s := newBatchScript()
		seen := s.run(3, perRequest(50*time.Millisecond, 10*time.Microsecond, 0, 1), nil)
		assert.Equal(t, 1, seen[batchAdopted])
		assert.Equal(t, 1000, s.c.size)
		assert.False(t, s.c.slowStart)
	})
	t.Run("a size that costs more per record is not kept, and sizes between are tried", func(t *testing.T) {
		s := newBatchScript()
		s.run(200, perRequest(10*time.Millisecond, 10*time.Microsecond, 300, 20), nil)
		assert.LessOrEqual(t, s.c.size, 300, "never above the size where it slows down")
		assert.GreaterOrEqual(t, s.c.size, 200, "and close to it")
	})
	t.Run("slow start's trial that costs more per record is followed by sizes between, one sample each", func(t *testing.T) {
		s := newBatchScript()
		slow := perRequest(10*time.Millisecond, 10*time.Microsecond, 400, 20)
		s.run(8, slow, nil) // 100, 1000 (too costly), 316 (kept), 562 (too costly)
		assert.Equal(t, 316, s.c.size, "half way by ratio, in a few round trips")
		assert.Equal(t, 562, s.c.ceil)
		assert.False(t, s.c.slowStart, "within twice the size of the ceiling, the search is done")

		s = newBatchScript()
		s.timeout = 2 * time.Second
		s.run(3, perRequest(10*time.Millisecond, 3*time.Millisecond, 0, 1), nil) // 1000 records: 3 s, its tail too long
		assert.Equal(t, 100, s.c.size)
		assert.False(t, s.c.slowStart, "a size too slow for the timeout ends slow start: sizes between queue into timeouts on few slots")
	})
	t.Run("after slow start a tenth of the start size is tried once, and kept where the index slows down below the start", func(t *testing.T) {
		s := newBatchScript()
		s.run(300, perRequest(time.Millisecond, 100*time.Microsecond, 20, 10), nil)
		assert.True(t, s.c.lookedDown)
		assert.LessOrEqual(t, s.c.size, 20, "never above the size where it slows down")
		assert.GreaterOrEqual(t, s.c.size, 10)

		s = newBatchScript()
		s.run(50, perRequest(10*time.Millisecond, 10*time.Microsecond, 0, 1), nil)
		assert.True(t, s.c.lookedDown)
		assert.Equal(t, MaxBatchSize, s.c.size, "a smaller size costs more per record on an index without a slow path")
	})
	t.Run("a size whose latency's tail takes most of the request timeout is not kept", func(t *testing.T) {
		s := newBatchScript()
		s.timeout = 2 * time.Second
		s.run(50, perRequest(10*time.Millisecond, 2*time.Millisecond, 0, 1), nil) // 1000 records: 2 s
		assert.Less(t, float64(perRequest(10*time.Millisecond, 2*time.Millisecond, 0, 1)(s.c.size)), s.tn.latencyShare*float64(s.timeout))
	})
	t.Run("a trial out longer than a size no worse would take is judged too large at once", func(t *testing.T) {
		s := newBatchScript()
		s.c.slowStart, s.c.lookedDown = false, true
		s.run(4, perRequest(10*time.Millisecond, 0, 0, 1), nil)
		size, trial := s.c.next(s.now, s.caps, true, 0.1, &s.tn)
		require.True(t, trial)
		s.c.sent(s.now, size)
		s.now = s.now.Add(time.Second)
		next, trial := s.c.next(s.now, s.caps, true, 0.1, &s.tn)
		assert.False(t, trial)
		assert.Equal(t, 100, next)
		assert.Equal(t, size, s.c.ceil)
	})
	t.Run("a trial batch given back unsent is handed out again", func(t *testing.T) {
		s := newBatchScript()
		size, trial := 0, false
		for range 10 { // the start size's answers, up to the first trial batch
			if size, trial = s.c.next(s.now, s.caps, true, 0.1, &s.tn); trial {
				break
			}
			s.now = s.now.Add(10 * time.Millisecond)
			s.c.answer(batchSample{now: s.now, records: size, latency: 10 * time.Millisecond, timeout: s.timeout, spread: 0.1}, &s.tn)
		}
		require.True(t, trial)
		require.Equal(t, s.c.trialSamples(&s.tn), s.c.trial.sent, "slow start's one trial batch")
		next, trial := s.c.next(s.now, s.caps, true, 0.1, &s.tn)
		require.False(t, trial, "handed out: the others wait for its answer")
		require.Equal(t, 100, next)
		handedOutFor := s.c.trials
		s.c.unsent(handedOutFor) // its call stopped
		again, trial := s.c.next(s.now, s.caps, true, 0.1, &s.tn)
		assert.True(t, trial)
		assert.Equal(t, size, again)

		s.c.capTrial() // the trial ends unjudged; the next one starts
		_, trial = s.c.next(s.now, s.caps, true, 0.1, &s.tn)
		require.True(t, trial)
		s.c.unsent(handedOutFor) // a batch of the trial before, dropped late
		_, trial = s.c.next(s.now, s.caps, true, 0.1, &s.tn)
		assert.False(t, trial, "only the trial that handed a batch out takes it back")
	})
	t.Run("a piece of a batch that timed out, timing out in turn, counts against the size", func(t *testing.T) {
		s := newBatchScript()
		s.c.slowStart, s.c.lookedDown = false, true
		s.run(4, perRequest(10*time.Millisecond, 0, 0, 1), nil)
		require.Equal(t, 100, s.c.size)
		timeout := batchSample{now: s.now, records: 100, latency: s.timeout, timeout: s.timeout, class: ClassTimeout, spread: 0.1}
		require.Equal(t, batchTimedOut, s.c.answer(timeout, &s.tn))
		half := timeout
		half.records = 50
		assert.Equal(t, batchHeld, s.c.answer(half, &s.tn), "a batch of 50 alone says nothing of 100")
		half.afterTimeout = true
		assert.Equal(t, batchTooLarge, s.c.answer(half, &s.tn), "the half of the one that timed out does")
		assert.Equal(t, 50, s.c.size)
	})
	t.Run("two timeouts of batches of the size kept make it too large", func(t *testing.T) {
		s := newBatchScript()
		s.c.slowStart = false
		s.c.lookedDown = true // no trial below
		seen := s.run(2, perRequest(10*time.Millisecond, 0, 0, 1), func(int) Class { return ClassTimeout })
		assert.Equal(t, 1, seen[batchTimedOut])
		assert.Equal(t, 1, seen[batchTooLarge])
		assert.Equal(t, 50, s.c.size)
		assert.True(t, s.c.halved, "a halving is a guess until a batch of it is answered")
		s.run(1, perRequest(10*time.Millisecond, 0, 0, 1), nil)
		assert.False(t, s.c.halved)
		assert.Equal(t, 100, s.c.ceil)
	})
	t.Run("a batch formed at a size since found too large goes out at the size adopted", func(t *testing.T) {
		s := newBatchScript()
		s.c.slowStart = false
		s.run(2, perRequest(10*time.Millisecond, 0, 0, 1), func(int) Class { return ClassTimeout })
		require.Equal(t, 100, s.c.ceil)
		assert.Equal(t, 50, s.c.sendLimit(s.now, s.caps, &s.tn), "not 99: the sizes between are as unknown as 100")
		size, trial := s.c.next(s.now, s.caps, true, 0.1, &s.tn)
		require.False(t, trial)
		s.c.trial = sizeStats{size: 75, sent: 1}
		assert.Equal(t, 75, s.c.sendLimit(s.now, s.caps, &s.tn), "a size being tried goes out as tried")
		assert.Equal(t, 50, size)
	})
	t.Run("a queue's timeout blames the size only at or below the concurrency it was adopted at", func(t *testing.T) {
		for _, tt := range []struct {
			name           string
			sizedAt, conc  int
			queued, blamed bool
		}{
			{"later requests came back in good time", 4, 18, false, true},
			{"the index queues, more in flight than at adoption", 4, 18, true, false},
			{"the index queues at the adoption's concurrency", 4, 4, true, true},
			{"the index queues below it", 4, 2, true, true},
			{"the first size, adopted at no measured concurrency", 0, 18, true, true},
		} {
			c := batchControl{sizedAt: tt.sizedAt}
			assert.Equal(t, tt.blamed, c.blames(batchSample{queued: tt.queued, conc: tt.conc}), tt.name)
		}
		s := newBatchScript()
		s.c.slowStart, s.c.sizedAt = false, 4
		for range 4 {
			s.c.answer(batchSample{now: s.now, records: 100, latency: s.timeout, timeout: s.timeout, class: ClassTimeout, queued: true, conc: 18}, &s.tn)
		}
		assert.Equal(t, 100, s.c.size, "queue timeouts at 18 in flight leave the size")
	})
	t.Run("the halves of a batch split are a measure of half the size, adopted when clearly cheaper per record", func(t *testing.T) {
		for _, tt := range []struct {
			name    string
			halves  []int         // records of the batches answered after the size's own
			latency time.Duration // of each of them
			want    int           // the size adopted after them
			reason  batchReason   // what the last of them did
		}{
			{"an index slow above a size between: the pieces take a fifth of the time", []int{50, 50}, 200 * time.Millisecond, 50, batchAdopted},
			{"one piece is not enough", []int{50}, 200 * time.Millisecond, 100, batchHeld},
			{"per request overhead: half the records take as long", []int{50, 50}, time.Second, 100, batchHeld},
			{"cheaper by less than halfCheaper: the pieces met a shorter queue", []int{50, 50}, 400 * time.Millisecond, 100, batchHeld},
			{"pieces of another size say nothing of half", []int{30, 30}, 100 * time.Millisecond, 100, batchHeld},
			{"an odd size's pieces, 50 and 51, count", []int{50, 51}, 200 * time.Millisecond, 50, batchAdopted},
		} {
			s := newBatchScript()
			s.c.slowStart, s.c.lookedDown = false, true
			for range 3 {
				s.now = s.now.Add(time.Second)
				s.c.answer(batchSample{now: s.now, records: 100, latency: time.Second, timeout: s.timeout, spread: 0.1}, &s.tn)
			}
			var reason batchReason
			for _, n := range tt.halves {
				s.now = s.now.Add(tt.latency)
				reason = s.c.answer(batchSample{now: s.now, records: n, latency: tt.latency, timeout: s.timeout, spread: 0.1}, &s.tn)
			}
			assert.Equal(t, tt.want, s.c.size, tt.name)
			assert.Equal(t, tt.reason, reason, tt.name)
			if tt.want < 100 {
				assert.Equal(t, 100, s.c.ceil, "%s: the size it replaced is too large for a while", tt.name)
				assert.Equal(t, 2, s.c.base.n, "%s: the pieces' answers measure the size adopted", tt.name)
			}
		}
		s := newBatchScript()
		s.c.slowStart = false
		s.c.answer(batchSample{now: s.now, records: 50, latency: 100 * time.Millisecond, spread: 0.1}, &s.tn)
		assert.Equal(t, 1, s.c.halves.n)
		s.c.forget()
		assert.Zero(t, s.c.halves.n, "a change of concurrency forgets the pieces' latencies with the size's")
	})
	t.Run("a request refused as too large makes its size too large", func(t *testing.T) {
		s := newBatchScript()
		s.c.slowStart = false
		s.run(1, perRequest(10*time.Millisecond, 0, 0, 1), func(int) Class { return ClassTooLarge })
		assert.Equal(t, 50, s.c.size)
	})
	t.Run("a size too large is forgotten after a while", func(t *testing.T) {
		s := newBatchScript()
		s.c.setCeiling(200, s.now.Add(time.Minute))
		assert.Equal(t, 199, s.c.maxSize(s.caps, &s.tn))
		s.c.expire(s.now.Add(time.Minute))
		assert.Equal(t, MaxBatchSize, s.c.maxSize(s.caps, &s.tn))
	})
	t.Run("under a capped record rate batches carry a twentieth of a second's worth, enough for the request cap and for the requests in flight to send the rate", func(t *testing.T) {
		s := newBatchScript()
		for _, tt := range []struct {
			records, requests float64
			carry             float64 // requests a second the requests in flight make
			want              int
		}{
			{math.Inf(1), math.Inf(1), 0, MaxBatchSize},
			{4000, math.Inf(1), 0, 200},
			{100, math.Inf(1), 0, 10},
			{8000, 10, 0, 1000},
			{4000, 100, 0, 200},
			{4000, 20, 0, 250},
			// Enough for the requests in flight to send 1.5 times the
			// rate: four in flight on one write slot of 200 ms make five
			// requests a second.
			{400, math.Inf(1), 5, 120},
			{4000, math.Inf(1), 10, 600},
			{4000, math.Inf(1), 100, 200}, // they carry a twentieth of a second's worth
			{math.Inf(1), math.Inf(1), 10, MaxBatchSize},
		} {
			caps := sizeCaps{records: tt.records, requests: tt.requests, carry: tt.carry}
			assert.Equal(t, tt.want, s.c.maxSize(caps, &s.tn), "%v records/s, %v requests/s, %v carried", tt.records, tt.requests, tt.carry)
		}
	})
	t.Run("slow start's trial cut short by a rate cap is tried again at the cap", func(t *testing.T) {
		capped := sizeCaps{records: 17_000, requests: math.Inf(1)} // batches of 850 at most
		for _, tt := range []struct {
			name   string
			inNext bool // the cap is seen forming the next batch, else sending the trial
		}{
			{"seen forming a batch", true},
			{"seen sending the trial", false},
		} {
			s := newBatchScript()
			s.run(1, perRequest(5*time.Millisecond, 0, 0, 1), nil)
			size, trial := s.c.next(s.now, s.caps, true, 0.1, &s.tn)
			require.True(t, trial, tt.name)
			require.Equal(t, 1000, size, tt.name)
			if tt.inNext {
				s.c.next(s.now, capped, true, 0.1, &s.tn)
			} else {
				assert.Equal(t, 100, s.c.sendLimit(s.now, capped, &s.tn), "%s: the batch formed goes out at the size adopted", tt.name)
			}
			assert.True(t, s.c.slowStart, "%s: the cap judged nothing", tt.name)
			assert.Zero(t, s.c.ceil, tt.name)
			size, trial = s.c.next(s.now, capped, true, 0.1, &s.tn)
			assert.True(t, trial, tt.name)
			assert.Equal(t, 850, size, tt.name)
			assert.Equal(t, 1, s.c.trialSamples(&s.tn), "%s: judged on one answer, as slow start's", tt.name)
		}
	})
	t.Run("an answer of a trial batch that went out smaller forgets the trial, unjudged, and slow start goes on", func(t *testing.T) {
		// Answered with fewer records than the size tried: cut when sent
		// (to a rate, after rule 20c forgot its trial and another began).
		s := newBatchScript()
		s.run(1, perRequest(5*time.Millisecond, 0, 0, 1), nil)
		size, trial := s.c.next(s.now, s.caps, true, 0.1, &s.tn)
		require.True(t, trial)
		s.c.sent(s.now, size)
		s.now = s.now.Add(5 * time.Millisecond)
		reason := s.c.answer(batchSample{now: s.now, records: 85, latency: 5 * time.Millisecond, trial: true, spread: 0.1}, &s.tn)
		assert.Equal(t, batchHeld, reason)
		assert.Zero(t, s.c.trial.size, "85 records say nothing of 1,000")
		assert.Zero(t, s.c.ceil)
		assert.True(t, s.c.slowStart, "the ten-times trial is still to come")
	})
	t.Run("slow start's trial held under ten times the size by a rate, once kept, leaves slow start on; held by a request's bytes, it ends it", func(t *testing.T) {
		for _, tt := range []struct {
			name      string
			caps      sizeCaps
			want      int // the size kept
			slowStart bool
			next      int // the next trial once the rate allows
		}{
			{"held by the record rate", sizeCaps{records: 5_000, requests: math.Inf(1)}, 250, true, 1000},
			{"held by the request rate", sizeCaps{records: 5_000, requests: 10}, 625, true, 1000},
			{"held by a request's bytes", sizeCaps{records: math.Inf(1), requests: math.Inf(1), perRequest: 400}, 400, false, 0},
		} {
			s := newBatchScript()
			s.caps = tt.caps
			s.run(3, perRequest(5*time.Millisecond, 10*time.Microsecond, 0, 1), nil)
			assert.Equal(t, tt.want, s.c.size, tt.name)
			assert.Equal(t, tt.slowStart, s.c.slowStart, tt.name)
			s.caps = sizeCaps{records: math.Inf(1), requests: math.Inf(1), perRequest: tt.caps.perRequest}
			size, trial := s.c.next(s.now, s.caps, true, 0.1, &s.tn)
			if tt.next == 0 {
				assert.False(t, trial && size > s.c.size, "%s: nothing larger to try", tt.name)
				continue
			}
			assert.True(t, trial, tt.name)
			assert.Equal(t, tt.next, size, "%s: ten times, judged on one answer", tt.name)
		}
	})
	t.Run("a trial is not started when the lane runs another experiment", func(t *testing.T) {
		s := newBatchScript()
		s.run(1, perRequest(10*time.Millisecond, 0, 0, 1), nil)
		_, trial := s.c.next(s.now, s.caps, false, 0.1, &s.tn)
		assert.False(t, trial)
	})
}

func TestBatchTooSlow(t *testing.T) {
	var c batchControl
	for _, tc := range []struct {
		name    string
		latency time.Duration // the mean of log latency, as a latency
		n       int
		timeout time.Duration
		want    bool
	}{
		{name: "one sample whose tail would take three quarters of the timeout: a spread lower, it does not", latency: 507 * time.Millisecond, n: 1, timeout: 2 * time.Second},
		{name: "three such samples: it does", latency: 507 * time.Millisecond, n: 3, timeout: 2 * time.Second, want: true},
		{name: "one sample slower still: it does", latency: 850 * time.Millisecond, n: 1, timeout: 2 * time.Second, want: true},
		{name: "no timeout: never", latency: time.Minute, n: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := batchSample{timeout: tc.timeout, spread: 0.47}
			assert.Equal(t, tc.want, c.tooSlow(math.Log(tc.latency.Seconds()), tc.n, s, &defaultTuning))
		})
	}
}

// A larger size is kept unless it costs more per record than probeWorse
// and the noise of its few answers explain: three answers of a size no
// worse, at a wide spread, read worse by chance.
func TestBatchJudgesALargerSizeOnItsNoise(t *testing.T) {
	stats := func(n int, latency time.Duration, size int) sizeStats {
		s := sizeStats{size: size}
		for range n {
			s.add(latency)
		}
		return s
	}
	for _, tt := range []struct {
		name     string
		spread   float64
		costlier float64 // the trial's cost per record over the kept size's
		want     batchReason
	}{
		{"no worse, no noise", 0, 1, batchAdopted},
		{"within probeWorse", 0, 1.08, batchAdopted},
		{"beyond probeWorse, no noise: too costly", 0, 1.3, batchTooLarge},
		{"beyond probeWorse, within the noise of three answers", 0.5, 1.3, batchAdopted},
		{"beyond the noise too", 0.5, 1.7, batchTooLarge},
	} {
		c := newBatchControl(MaxBatchSize, &defaultTuning)
		c.slowStart, c.lookedDown = false, true
		c.base = stats(20, 100*time.Millisecond, 100)
		c.trial = stats(2, time.Duration(float64(200*time.Millisecond)*tt.costlier), 200)
		c.trial.sent, c.trial.out = 3, 1
		got := c.answer(batchSample{now: time.Now(), records: 200, latency: time.Duration(float64(200*time.Millisecond) * tt.costlier),
			timeout: 30 * time.Second, trial: true, spread: tt.spread, conc: 4}, &defaultTuning)
		assert.Equal(t, tt.want, got, tt.name)
	}
}

func TestBatchSearched(t *testing.T) {
	for _, tt := range []struct {
		name       string
		size       int
		slowStart  bool
		lookedDown bool
		trial      int
		want       bool
	}{
		{"slow start goes on", 100, true, false, 0, false},
		{"the size below the start not looked at", 100, false, false, 0, false},
		{"looked at", 100, false, true, 0, true},
		{"a trial out", 100, false, true, 200, false},
		{"too small to look below", 9, false, false, 0, true},
	} {
		c := newBatchControl(MaxBatchSize, &defaultTuning)
		c.size, c.slowStart, c.lookedDown, c.trial.size = tt.size, tt.slowStart, tt.lookedDown, tt.trial
		assert.Equal(t, tt.want, c.searched(&defaultTuning), tt.name)
	}
}
