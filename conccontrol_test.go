package upsert

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// concScript drives a concurrency controller against an index whose
// latency is latency(level), every answer a full batch with the slots
// taken.
type concScript struct {
	c      concControl
	tn     tuning
	issued uint64
}

func newConcScript() *concScript {
	s := &concScript{tn: defaultTuning}
	s.c = newConcControl(&s.tn)
	return s
}

// answers feeds n answers sent at the current limit, each of the latency
// latency gives for that limit, and returns the reasons seen.
func (s *concScript) answers(n int, latency func(level int) time.Duration, edit func(*concSample)) map[concReason]int {
	seen := make(map[concReason]int)
	for range n {
		s.issued++
		cs := concSample{
			seq: s.issued, issued: s.issued, latency: latency(s.c.limit), full: true, slotBound: true,
			mayTry: true, spread: 0.1,
		}
		if edit != nil {
			edit(&cs)
		}
		seen[s.c.answer(cs, &s.tn)]++
	}
	return seen
}

// slots is an index with k write slots and a fixed service time: latency
// grows with the level above k (requests queue).
func slots(k int, service time.Duration) func(int) time.Duration {
	return func(level int) time.Duration {
		return time.Duration(float64(service) * math.Max(1, float64(level)/float64(k)))
	}
}

// trialFrom returns a script out of slow start, at level, trying the next
// step up, which must be want.
func trialFrom(t *testing.T, level, want int) *concScript {
	s := newConcScript()
	s.c.slowStart = false
	s.c.set(level, s.issued)
	s.c.try(s.issued, &s.tn)
	require.Equal(t, want, s.c.limit)
	return s
}

func TestConcControl(t *testing.T) {
	flat := func(int) time.Duration { return 50 * time.Millisecond }
	t.Run("slow start doubles while each doubling pays", func(t *testing.T) {
		s := newConcScript()
		s.answers(500, flat, nil)
		assert.Equal(t, s.tn.maxConcurrency, s.c.limit, "an index that does not queue takes the most")
	})
	t.Run("a level that only queues is not kept", func(t *testing.T) {
		s := newConcScript()
		s.answers(2000, slots(16, 50*time.Millisecond), nil)
		assert.GreaterOrEqual(t, s.c.limit, 16, "the slots are kept full")
		assert.LessOrEqual(t, s.c.limit, 24, "and little more than full: more would only queue")
		assert.False(t, s.c.slowStart)
	})
	t.Run("a level that queues is left for a lower one", func(t *testing.T) {
		s := newConcScript()
		s.c.slowStart, s.c.down = false, true
		s.c.set(48, s.issued)
		s.answers(4000, slots(16, 50*time.Millisecond), nil)
		assert.Less(t, s.c.limit, 48)
		assert.GreaterOrEqual(t, s.c.limit, 16)
	})
	t.Run("nothing is tried while a rate holds requests back or the slots are not full", func(t *testing.T) {
		for _, edit := range []func(*concSample){
			func(cs *concSample) { cs.rateBound = true },
			func(cs *concSample) { cs.slotBound = false },
			func(cs *concSample) { cs.mayTry = false },
		} {
			s := newConcScript()
			s.answers(500, flat, edit)
			assert.Equal(t, s.tn.startConcurrency, s.c.limit)
		}
	})
	t.Run("a refusal does not end slow start: a rate that binds stops its trials itself", func(t *testing.T) {
		for _, tt := range []struct {
			name      string
			rateBound bool
			want      int
		}{
			{"a refusal of the first wave, the rate then binding nothing: slow start doubles on", false, 64},
			{"a rate that binds: nothing tried", true, 4},
		} {
			s := newConcScript()
			s.answers(1, flat, func(cs *concSample) { cs.class = ClassRateLimited })
			s.answers(500, flat, func(cs *concSample) { cs.rateBound = tt.rateBound })
			assert.Equal(t, tt.want, s.c.limit, tt.name)
			assert.True(t, s.c.slowStart, tt.name)
		}
	})
	t.Run("a timeout of a loaded index takes a quarter off, once per round trip", func(t *testing.T) {
		s := newConcScript()
		s.c.set(16, s.issued)
		seen := s.answers(8, flat, func(cs *concSample) { cs.class, cs.loaded = ClassTimeout, true; cs.seq = 1 })
		assert.Equal(t, 1, seen[concTimedOut])
		assert.Equal(t, 12, s.c.limit)
		assert.False(t, s.c.slowStart)
	})
	t.Run("a floor raised is the lowest level", func(t *testing.T) {
		loadedTimeout := func(cs *concSample) { cs.class, cs.loaded = ClassTimeout, true }
		for _, tt := range []struct {
			name   string
			script func(s *concScript)
			want   int
		}{
			{"no floor: a timeout at two leaves one", func(s *concScript) {
				s.c.set(2, s.issued)
				s.answers(1, flat, loadedTimeout)
			}, 1},
			{"a floor of two: a timeout at two leaves two", func(s *concScript) {
				s.c.raiseFloor(2, s.issued)
				s.c.set(2, s.issued)
				s.answers(1, flat, loadedTimeout)
			}, 2},
			{"a floor of two: no lower level is tried from two", func(s *concScript) {
				s.c.raiseFloor(2, s.issued)
				s.c.set(2, s.issued)
				s.c.down = true
				s.answers(400, slots(1, 50*time.Millisecond), nil)
			}, 2},
			{"a floor raised raises the level", func(s *concScript) {
				s.c.set(1, s.issued)
				s.c.raiseFloor(2, s.issued)
			}, 2},
			{"a floor raised abandons a trial from a level under it", func(s *concScript) {
				s.c.set(1, s.issued)
				s.c.try(s.issued, &s.tn)
				require.Equal(t, 2, s.c.limit)
				s.c.raiseFloor(2, s.issued)
				require.Zero(t, s.c.trial.level)
				s.answers(400, slots(1, 50*time.Millisecond), nil)
			}, 2},
			{"a floor raised abandons a trial under it", func(s *concScript) {
				s.c.set(2, s.issued)
				s.c.down = true
				s.c.try(s.issued, &s.tn)
				require.Equal(t, 1, s.c.limit)
				s.c.raiseFloor(2, s.issued)
				require.Zero(t, s.c.trial.level)
			}, 2},
		} {
			s := newConcScript()
			s.c.slowStart = false
			tt.script(s)
			assert.Equal(t, tt.want, s.c.limit, tt.name)
		}
	})
	t.Run("a timeout of the batch size's trial is the size's, not the load's", func(t *testing.T) {
		s := newConcScript()
		s.c.set(16, s.issued)
		seen := s.answers(1, flat, func(cs *concSample) { cs.class, cs.loaded, cs.full, cs.sizeShed = ClassTimeout, true, false, true })
		assert.Zero(t, seen[concTimedOut])
		assert.Equal(t, 16, s.c.limit)
		assert.True(t, s.c.slowStart)
	})
	t.Run("a timeout of a loaded index while a higher level is tried rejects that level", func(t *testing.T) {
		s := trialFrom(t, 9, 13)
		holdFor := s.c.holdFor
		seen := s.answers(1, flat, func(cs *concSample) { cs.class, cs.loaded = ClassTimeout, true })
		assert.Equal(t, 1, seen[concTimedOut])
		assert.Equal(t, 9, s.c.limit, "a quarter off the level tried")
		assert.True(t, s.c.down, "the next trial is of a lower level")
		assert.Equal(t, holdFor, s.c.hold, "and waits as after a rejection")
		assert.Equal(t, 6, s.c.step(&s.tn))
	})
	t.Run("a timeout while later requests were answered in time is the request's, not the load's", func(t *testing.T) {
		s := newConcScript()
		s.c.set(16, s.issued)
		seen := s.answers(8, flat, func(cs *concSample) { cs.class = ClassTimeout })
		assert.Zero(t, seen[concTimedOut])
		assert.Equal(t, 16, s.c.limit)
	})
	t.Run("the requests a higher level lets out at once measure nothing of it", func(t *testing.T) {
		s := trialFrom(t, 8, 12)
		s.answers(4, flat, nil) // the four let out at once, queued behind the eight before
		assert.Zero(t, s.c.trial.n)
		s.answers(1, flat, nil)
		assert.Equal(t, 1, s.c.trial.n, "the fifth queued behind the level tried")
	})
	t.Run("a level that only queues is not kept when its first answers came at the old level's latency", func(t *testing.T) {
		// FIFO slots: a request waits for those sent before it, so the
		// requests a doubling lets out at once take the old level's time.
		s := newConcScript()
		s.c.set(16, s.issued)
		before, old := s.issued, 16
		latency := func(level int) time.Duration {
			if s.issued <= before+uint64(level-old) {
				return slots(16, 50*time.Millisecond)(old)
			}
			return slots(16, 50*time.Millisecond)(level)
		}
		s.c.try(s.issued, &s.tn)
		s.c.base = levelStats{level: 16}
		for range 16 {
			s.c.base.add(50 * time.Millisecond)
		}
		before = s.issued
		seen := s.answers(48, latency, nil)
		assert.Equal(t, 1, seen[concRejected], "32 in flight on 16 slots only queue")
		assert.Equal(t, 16, s.c.limit)
	})
	t.Run("slow start measures on a doubling that falls short of paying by less than the noise", func(t *testing.T) {
		// Eight answers at 4 and at 8, at a spread of 0.7: one standard
		// error of the difference is 0.35 in log latency. A doubling pays
		// when its latency grew by at most log(2 / 1.3).
		bar := math.Log(2 / (1 + defaultTuning.minGain))
		for _, tt := range []struct {
			name       string
			short      float64 // how far past the bar the trial's mean log latency is
			judgeNoise float64
			answers    int
			want       concReason
		}{
			{"short by a tenth, within half a standard error: measured on", 0.1, 0.5, 8, concHeld},
			{"the same without the rule: rejected, and slow start ends", 0.1, 0, 8, concRejected},
			{"short by half: rejected", 0.5, 0.5, 8, concRejected},
			{"measured on no further than an epoch out of slow start would be", 0.1, 0.5, 32, concRejected},
		} {
			s := newConcScript()
			s.tn.judgeNoise, s.tn.retryNoise = tt.judgeNoise, 0 // a rejection here ends slow start (TestConcControlTriesACloseDoublingOnce)
			for range 8 {
				s.c.base.add(100 * time.Millisecond)
			}
			s.c.try(s.issued, &s.tn)
			require.Equal(t, 8, s.c.trial.level)
			s.issued += 4 // the four let out at once
			trial := time.Duration(float64(100*time.Millisecond) * math.Exp(bar+tt.short))
			seen := s.answers(tt.answers, func(int) time.Duration { return trial }, func(cs *concSample) { cs.spread = 0.7 })
			if tt.want == concRejected {
				assert.Equal(t, 1, seen[concRejected], tt.name)
				assert.Equal(t, 4, s.c.limit, tt.name)
				assert.False(t, s.c.slowStart, tt.name)
			} else {
				assert.Equal(t, map[concReason]int{concHeld: tt.answers}, seen, tt.name)
				assert.Equal(t, 8, s.c.trial.level, tt.name)
			}
		}
	})
	t.Run("slow start tests a lower level before a doubling that would queue past the timeout", func(t *testing.T) {
		oneSlot := slots(1, 250*time.Millisecond)                  // 4 in flight take 1 s; 8 would take 2 s
		slowSize := func(int) time.Duration { return time.Second } // the size is slow, the slots many
		for _, tt := range []struct {
			name       string
			latency    func(int) time.Duration
			timeout    time.Duration
			queueShare float64
			wantMax    int            // the highest level slow start reached
			wantFinal  func(int) bool // nil: any
			wantSlow   bool           // still in slow start
		}{
			{"one slot: the lower level loses nothing, and slow start ends under 4", oneSlot, 2 * time.Second, 0.75, 4,
				func(l int) bool { return l < 4 }, false},
			{"the same without the rule: doubles into the timeout", oneSlot, 2 * time.Second, math.Inf(1), 8, nil, false},
			{"a slow size on many slots: the lower level loses, and slow start doubles on", slowSize, 2 * time.Second, 0.75, 64,
				func(l int) bool { return l == 64 }, true},
			{"no request timeout: nothing to queue past", oneSlot, 0, 0.75, 8, nil, false},
			{"far under the timeout: doubles", oneSlot, 30 * time.Second, 0.75, 8, nil, false},
		} {
			s := newConcScript()
			s.tn.queueShare = tt.queueShare
			highest := s.c.limit
			for range 3000 {
				s.answers(1, tt.latency, func(cs *concSample) { cs.timeout = tt.timeout })
				highest = max(highest, s.c.limit)
			}
			assert.Equal(t, tt.wantMax, highest, tt.name)
			if tt.wantFinal != nil {
				assert.True(t, tt.wantFinal(s.c.limit), "%s: level %d", tt.name, s.c.limit)
			}
			assert.Equal(t, tt.wantSlow, s.c.slowStart, tt.name)
		}
	})
	t.Run("in slow start a level is measured over half of it, at least epochAnswers or the level", func(t *testing.T) {
		s := newConcScript()
		for _, tt := range []struct{ level, epoch int }{{4, 4}, {8, 8}, {20, 16}, {64, 32}} {
			s.c.set(tt.level, s.issued)
			assert.Equal(t, tt.epoch, s.c.epoch(0.1, &s.tn), "level %d", tt.level)
		}
	})
	t.Run("a lower level tried is measured over a quarter of the answers a higher one is", func(t *testing.T) {
		for _, tt := range []struct {
			name  string
			down  bool
			tried int
			share float64
		}{
			{"12 tried from 8: as many as tell its gain from noise", false, 12, 1},
			{"5 tried from 8: a quarter of those", true, 5, 0.25},
		} {
			s := newConcScript()
			s.c.slowStart, s.c.down = false, tt.down
			s.c.set(8, s.issued)
			s.c.try(s.issued, &s.tn)
			require.Equal(t, tt.tried, s.c.limit)
			enough := s.c.enough(0.7, float64(tt.tried)/8, &s.tn)
			require.Greater(t, enough, 4*s.tn.epochAnswers, "at a spread of 0.7")
			assert.Equal(t, int(tt.share*float64(enough)), s.c.epoch(0.7, &s.tn), tt.name)
		}
	})
	t.Run("epochs lengthen with the latency's spread", func(t *testing.T) {
		s := newConcScript()
		s.c.slowStart = false
		assert.Equal(t, s.tn.epochAnswers, s.c.epoch(0.1, &s.tn))
		assert.Greater(t, s.c.epoch(1, &s.tn), 4*s.tn.epochAnswers)
	})
	t.Run("in slow start, a larger batch size takes that many more requests in flight", func(t *testing.T) {
		s := newConcScript()
		s.c.follow(3, math.Log(0.15), s.issued, &s.tn)
		assert.Equal(t, 3*s.tn.startConcurrency, s.c.limit)
		s.c.slowStart = false
		s.c.follow(3, math.Log(0.15), s.issued, &s.tn)
		assert.Equal(t, 3*s.tn.startConcurrency, s.c.limit, "not after slow start")
	})
	t.Run("a raise's wave that queued is measured again from after it; one that did not stands", func(t *testing.T) {
		sizeLog := math.Log(0.05) // the larger size's answer that raised the level
		for _, tt := range []struct {
			name      string
			wave      time.Duration // the latency of the level's first answers
			spread    float64       // pooled, of log latency
			remeasure bool
			want      int // the level after the first epoch
		}{
			{"the wave took four times the size's answer: it queued", 200 * time.Millisecond, 0.1, true, 12},
			{"the wave took the size's time: the level doubles", 50 * time.Millisecond, 0.1, false, 24},
			{"past the spread, within waveQueued: the client's noise", 60 * time.Millisecond, 0.1, false, 24},
			{"past waveQueued, within a jittery index's spread: noise", 75 * time.Millisecond, 0.5, false, 24},
		} {
			s := newConcScript()
			s.c.follow(3, sizeLog, s.issued, &s.tn)
			require.Equal(t, 12, s.c.limit)
			wave := s.c.wave
			epoch := s.c.epoch(tt.spread, &s.tn)
			s.answers(epoch, func(int) time.Duration { return tt.wave }, func(cs *concSample) { cs.spread = tt.spread })
			assert.Equal(t, tt.want, s.c.limit, tt.name)
			if tt.remeasure {
				assert.Equal(t, wave, s.c.from, tt.name)
				assert.Zero(t, s.c.base.n, tt.name)
			}
		}
	})
}

// levelOf returns the stats of n answers at level, each of latency d,
// with the slots taken.
func levelOf(level, n int, d time.Duration) levelStats {
	s := levelStats{level: level, bound: true}
	for range n {
		s.add(d)
	}
	return s
}

func TestConcControlTriesACloseDoublingOnce(t *testing.T) {
	// At the pooled spread of 0.5 and eight answers a level, a standard
	// error of the difference is 0.25: a doubling of 100 ms answers pays
	// up to 154 ms (tuning.minGain), and retryNoise allows 0.375 more.
	for _, tt := range []struct {
		name        string
		retried     bool
		trial       time.Duration
		slowStart   bool
		limit       int
		wantRetried bool
	}{
		{"short by less than retryNoise standard errors: back to four, slow start goes on", false, 180 * time.Millisecond, true, 4, true},
		{"the second such rejection since a level was kept ends slow start", true, 180 * time.Millisecond, false, 4, true},
		{"short by more ends slow start at once", false, 300 * time.Millisecond, false, 4, false},
		{"a doubling that pays is kept, the next tried, and a close rejection allowed again", true, 110 * time.Millisecond, true, 16, false},
	} {
		s := newConcScript()
		s.c.base, s.c.trial, s.c.retried = levelOf(4, 8, 100*time.Millisecond), levelOf(8, 8, tt.trial), tt.retried
		s.c.set(8, s.issued)
		s.c.judge(s.issued, true, 0.5, &s.tn)
		assert.Equal(t, tt.slowStart, s.c.slowStart, tt.name)
		assert.Equal(t, tt.limit, s.c.limit, tt.name)
		assert.Equal(t, tt.wantRetried, s.c.retried, tt.name)
	}
}
