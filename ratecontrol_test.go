package upsert

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rateScript drives a rate controller: requests of amount sent every step
// for a duration, each answered at once, refused when refuse says so.
type rateScript struct {
	t     *testing.T
	c     rateControl
	now   time.Time
	seq   uint64
	tn    tuning
	bound bool
	// doubling is what the lane passes as four round trips: of the 10 ms
	// answers the script mostly sends.
	doubling time.Duration
	least    float64 // the amount of the lane's smallest batch; 0: none
}

func newRateScript(t *testing.T) *rateScript {
	s := &rateScript{t: t, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), tn: defaultTuning, bound: true, doubling: 40 * time.Millisecond}
	s.c.withPrior(s.now, 0, &s.tn)
	return s
}

// answer sends one request of amount and answers it after latency.
func (s *rateScript) answer(amount float64, refused bool, latency time.Duration) rateReason {
	s.c.send(s.now, amount)
	s.seq++
	seq := s.seq
	s.now = s.now.Add(latency)
	return s.c.answer(rateSample{
		now: s.now, amount: amount, seq: seq, issued: s.seq, refused: refused, bound: s.bound,
		window: s.tn.minWindow, doubling: s.doubling, least: s.least,
	}, &s.tn, 1)
}

// run sends a request of amount every step for d, refusing those refuse
// picks (by their index), and returns the reasons seen.
func (s *rateScript) run(d, step time.Duration, amount float64, refuse func(i int) bool) map[rateReason]int {
	seen := make(map[rateReason]int)
	for i := 0; i < int(d/step); i++ {
		seen[s.answer(amount, refuse != nil && refuse(i), step)]++
	}
	return seen
}

// pattern answers a request of amount for each of answers, 10 ms apart:
// '.' accepted, 'x' refused; it returns what the controller did with the
// last.
func (s *rateScript) pattern(answers string, amount float64) rateReason {
	var got rateReason
	for _, a := range answers {
		got = s.answer(amount, a == 'x', 10*time.Millisecond)
	}
	return got
}

func TestRateControl(t *testing.T) {
	t.Run("no limit until the index refuses", func(t *testing.T) {
		s := newRateScript(t)
		seen := s.run(time.Second, 10*time.Millisecond, 100, nil)
		assert.Equal(t, 100, seen[rateHeld])
		assert.False(t, s.c.capped())
	})
	t.Run("a known limit starts a tenth above it, on the level, and is probed above while it binds", func(t *testing.T) {
		var c rateControl
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		c.withPrior(now, 100, &defaultTuning)
		assert.InDelta(t, 110, c.limit, 1e-9)
		s := &rateScript{t: t, c: c, now: now, tn: defaultTuning, bound: true}
		s.run(2*defaultTuning.recovery, 10*time.Millisecond, 1, nil)
		assert.Greater(t, s.c.limit, 110*(1+defaultTuning.probeGain), "a prior is not a ceiling: two recoveries on, the probe has passed it")
	})
	t.Run("a cut that finds the index at its known limit keeps to it, without probing above", func(t *testing.T) {
		s := newRateScript(t)
		s.c.withPrior(s.now, 100, &s.tn)
		s.run(2*time.Second, 10*time.Millisecond, 1, nil)                                   // 100 a second accepted
		s.run(100*time.Millisecond, 10*time.Millisecond, 1, func(int) bool { return true }) // then refused
		assert.True(t, s.c.ceiling)
		assert.InDelta(t, 100, s.c.limit, 1e-9)
		s.run(3*s.tn.recovery, 10*time.Millisecond, 1, nil)
		assert.InDelta(t, 100, s.c.limit, 1e-9, "the known limit is the index's")
	})
	t.Run("a cut that finds the index off its known limit lifts the ceiling", func(t *testing.T) {
		s := newRateScript(t)
		s.c.withPrior(s.now, 100, &s.tn)
		s.run(2*time.Second, 10*time.Millisecond, 1, nil)
		s.run(100*time.Millisecond, 10*time.Millisecond, 1, func(int) bool { return true })
		require.True(t, s.c.ceiling)
		s.run(2*time.Second, 20*time.Millisecond, 1, nil) // the index's limits drop: 50 a second accepted
		seen := s.run(60*time.Millisecond, 20*time.Millisecond, 1, func(int) bool { return true })
		require.Equal(t, 1, seen[rateCut])
		assert.False(t, s.c.ceiling)
		s.run(4*s.tn.recovery, 5*time.Millisecond, 1, nil)
		assert.Greater(t, s.c.limit, 100.0, "limits that changed once may rise again: the probe passes the old one")
	})
	t.Run("the first cut comes at two refusals in a row", func(t *testing.T) {
		s := newRateScript(t)
		assert.Equal(t, rateNoise, s.answer(100, true, 10*time.Millisecond))
		s.run(100*time.Millisecond, 10*time.Millisecond, 100, nil)
		s.answer(0, true, 0) // the refusal before it, answered with it
		assert.Equal(t, rateFirstCut, s.answer(100, true, 10*time.Millisecond))
		require.True(t, s.c.capped())
		// A cut's depth under what the index accepted since the start
		// (1,000 records in 220 ms, the meter's whole buckets), more than
		// half of what was sent (1,200 records).
		assert.InDelta(t, (1-defaultTuning.cutDepth)*1000/0.22, s.c.limit, 100)
		assert.Positive(t, s.c.search.pace, "the first cut measures a floor: it searches up from it")
	})
	t.Run("the first cut's floor", func(t *testing.T) {
		// Each script answers a first refusal (no episode) and ten
		// requests of 100 records, one every 10 ms; then, after more,
		// the refusal that makes the first cut.
		for _, tt := range []struct {
			name   string
			window time.Duration // the least span that measures a rate: four round trips
			more   func(s *rateScript)
			want   float64
			pace   func(tn *tuning) time.Duration // the least time its search takes to double
		}{
			{"half of what was sent: slow start doubled within the last round trip", 300 * time.Millisecond,
				func(s *rateScript) { s.c.send(s.now, 1000) }, // ten more in flight
				2200 / 0.22 / 2, guessed},
			{"a cut's depth under what was accepted since the start, not diluted by a window longer than the run", 2 * time.Second,
				func(*rateScript) {},
				(1 - defaultTuning.cutDepth) * 1000 / 0.22, measured},
			{"what was accepted, spread over a second", 300 * time.Millisecond,
				func(s *rateScript) { s.now = s.now.Add(500 * time.Millisecond) }, // nothing sent since
				1000, guessed},
		} {
			t.Run(tt.name, func(t *testing.T) {
				s := newRateScript(t)
				s.tn.minWindow = tt.window
				s.answer(100, true, 10*time.Millisecond)
				s.run(100*time.Millisecond, 10*time.Millisecond, 100, nil)
				tt.more(s)
				s.answer(0, true, 0) // two in a row
				require.Equal(t, rateFirstCut, s.answer(100, true, 10*time.Millisecond))
				assert.InDelta(t, tt.want, s.c.limit, 0.02*tt.want)
				assert.Equal(t, tt.pace(&s.tn), s.c.search.pace, "a measure searches at a later cut's pace, a guess at the first search's")
			})
		}
	})
	t.Run("a search doubles every few round trips while bound, at most once between two answers", func(t *testing.T) {
		s := newRateScript(t)
		s.doubling = 2 * s.tn.minWindow // four round trips of a slow index: above either floor
		s.answer(100, true, 10*time.Millisecond)
		s.run(100*time.Millisecond, 10*time.Millisecond, 100, nil)
		s.answer(0, true, 0)
		require.Equal(t, rateFirstCut, s.answer(100, true, 10*time.Millisecond))
		from := s.c.limit
		s.run(s.doubling, 10*time.Millisecond, 1, nil) // answers all along: one doubling period
		assert.InDelta(t, 2*from, s.c.limit, 0.1*from)
		from = s.c.limit
		assert.Equal(t, rateGrew, s.answer(1, false, 5*time.Second), "one answer after a request waited 5 s for its tokens")
		assert.InDelta(t, 2*from, s.c.limit, 1e-6*from, "a gap without answers measures nothing: not 2^(5 s / doubling)")
	})
	t.Run("on a fast index a search doubles no sooner than its pace", func(t *testing.T) {
		grown := func(pace func(*tuning) time.Duration) float64 {
			s := capScript(t, 1000)
			s.c.episodes, s.c.search.pace = 1, pace(&s.tn)
			s.run(s.tn.firstSearchFor, 10*time.Millisecond, 1, nil) // 4 round trips: 40 ms, under either pace
			return s.c.limit / 1000
		}
		first, later := grown(guessed), grown(measured)
		assert.InDelta(t, 2, first, 1e-3, "a first floor guessed before anything was known")
		assert.InDelta(t, math.Exp2(defaultTuning.firstSearchFor.Seconds()/defaultTuning.minWindow.Seconds()), later, 1e-3, "a measured level, near the capacity: a window's pace")
		assert.Greater(t, first, later)
	})
	t.Run("a search doubles no sooner than two of the smallest requests take at its limit", func(t *testing.T) {
		for _, tt := range []struct {
			name         string
			limit, least float64 // records a second; records of the smallest batch
			paced        bool    // two of those take longer than the window's pace
		}{
			{"no smallest batch known: a window's pace", 40, 0, false},
			{"batches of 10 at 1000 a second: a window's pace", 1000, 10, false},
			{"batches of 10 at 40 a second: half a second, less as it grows", 40, 10, true},
		} {
			s := capScript(t, tt.limit)
			s.c.search.pace, s.least = s.tn.minWindow, tt.least
			s.run(s.tn.minWindow, 100*time.Millisecond, 1, nil) // one window's pace of answers
			grown := s.c.limit / tt.limit
			if tt.paced {
				assert.InDelta(t, 1.62, grown, 0.01, "%s: ×2^(0.1 s / 2×10/limit) at each answer", tt.name)
			} else {
				assert.InDelta(t, 2, grown, 1e-3, tt.name)
			}
		}
	})
	t.Run("a refusal of a request sent before the cut is the same episode", func(t *testing.T) {
		s := capScript(t, 1000)
		s.seq++ // a request sent before the cut, answered after it
		before := s.seq
		s.c.cutSeq = before
		r := s.c.answer(rateSample{now: s.now, amount: 10, seq: before, issued: before, refused: true, window: s.tn.minWindow}, &s.tn, 1)
		assert.Equal(t, rateSameEpisode, r)
	})
	t.Run("refusals while nothing was accepted since the cut drain what came before it", func(t *testing.T) {
		s := capScript(t, 1000)
		assert.Equal(t, rateDraining, s.answer(10, true, 10*time.Millisecond))
		assert.Equal(t, rateDraining, s.answer(10, true, 10*time.Millisecond))
	})
	t.Run("an episode's level is what the index accepted since the last cut", func(t *testing.T) {
		// 800 a second accepted for two seconds (one request of 8 every
		// 10 ms), then refusals.
		s := capScript(t, 1000)
		s.c.limit = s.c.level // past the climb: refusals are not the usual share's
		s.run(2*time.Second, 10*time.Millisecond, 8, nil)
		assert.Equal(t, rateNoise, s.answer(8, true, 10*time.Millisecond), "a lone refusal of an index that refused nothing is no episode")
		assert.Equal(t, rateNoise, s.answer(8, true, 10*time.Millisecond))
		assert.Equal(t, rateCut, s.answer(8, true, 10*time.Millisecond), "three among the last 64 answers are")
		assert.InDelta(t, 800, s.c.level, 10)
		assert.InDelta(t, 800*(1-defaultTuning.cutDepth), s.c.limit, 10)
	})
	t.Run("refusals while the limit climbs back cut without lowering the level, unless they come in a row", func(t *testing.T) {
		for _, tt := range []struct {
			name      string
			refuse    func(i int) bool
			wantLevel float64
		}{
			{"one in six: the usual share or a bucket refilling late", func(i int) bool { return i%6 == 0 }, 1000},
			{"in a row: the capacity fell under the climb", func(i int) bool { return i < 3 }, 600},
		} {
			// The last cut measured 1,000 a second; the limit climbs back
			// from 600, and the lane sends that.
			s := capScript(t, 1000)
			s.c.limit, s.c.depth = 600, 0.4
			s.c.origin = s.now.Add(time.Hour) // far from back
			s.run(2*time.Second, 10*time.Millisecond, 6, nil)
			seen := s.run(130*time.Millisecond, 10*time.Millisecond, 6, tt.refuse) // the third refusal last
			require.Equal(t, 1, seen[rateCut], tt.name)
			assert.InDelta(t, tt.wantLevel, s.c.level, 0.1*tt.wantLevel, tt.name)
			assert.InDelta(t, tt.wantLevel*(1-s.tn.cutDepth), s.c.limit, 0.1*tt.wantLevel, tt.name)
		}
	})
	t.Run("a capacity that rose during the climb is measured over the climb's second half", func(t *testing.T) {
		// The last cut found 1000 a second; the index accepts that for a
		// second, then 2000 a second for another, then refuses.
		s := capScript(t, 1000)
		s.c.limit = s.c.level
		s.run(time.Second, 10*time.Millisecond, 10, nil)
		s.run(time.Second, 10*time.Millisecond, 20, nil)
		seen := s.run(30*time.Millisecond, 10*time.Millisecond, 20, func(int) bool { return true })
		require.Equal(t, 1, seen[rateCut])
		assert.InDelta(t, 2000, s.c.level, 100, "not the average of the ramp, 1500")
	})
	t.Run("time the index was down is no part of what it accepted since the last cut", func(t *testing.T) {
		s := capScript(t, 1000)
		s.c.limit = s.c.level
		s.bound = false // the lane sends under the limit: the probe holds
		s.run(time.Second, 10*time.Millisecond, 8, nil)
		s.now = s.now.Add(time.Second) // an outage: the breaker held every request
		s.c.pause(s.now.Add(-time.Second), s.now)
		s.run(time.Second, 10*time.Millisecond, 8, nil)
		seen := s.run(30*time.Millisecond, 10*time.Millisecond, 8, func(int) bool { return true })
		assert.Equal(t, 1, seen[rateCut])
		assert.InDelta(t, 800, s.c.level, 20)
	})
	t.Run("time the index was down is no part of the windows rates are measured over", func(t *testing.T) {
		s := capScript(t, 1000)
		s.c.limit = math.Inf(1)
		s.run(time.Second, 10*time.Millisecond, 10, nil)
		from := s.now
		s.now = s.now.Add(time.Second)
		s.c.pause(from, s.now)
		assert.InDelta(t, 1000, s.c.sent.rateOver(s.now, 2*time.Second), 20, "sent while up, not half of it")
		assert.InDelta(t, 1000, s.c.taken.rateOver(s.now, 2*time.Second), 20, "accepted while up")
		assert.Equal(t, time.Second, s.c.climbed.paused)
	})
	t.Run("refusals at the index's usual share do not cut, more than it do", func(t *testing.T) {
		s := capScript(t, 1000)
		s.c.quiet = usualRefusals{answers: 1000, refused: 40, climbs: 2} // it refuses 4% anyway
		s.c.limit = s.c.level
		s.run(time.Second, 10*time.Millisecond, 8, nil)
		seen := s.run(10*time.Second, 10*time.Millisecond, 8, func(i int) bool { return i%25 == 0 })
		assert.Zero(t, seen[rateCut], "one in 25 is the usual share")
		assert.Positive(t, seen[rateNoise])
		seen = s.run(time.Second, 10*time.Millisecond, 8, func(i int) bool { return i%3 == 0 })
		assert.Positive(t, seen[rateCut], "one in three is not")
	})
	t.Run("a lone refusal of the probe above the level restarts it, unless the index refuses at random", func(t *testing.T) {
		for _, tt := range []struct {
			name      string
			amount    float64 // accepted per 10 ms, against a level of 1,000 a second
			climbing  bool    // the limit still climbs back to the level
			noise     float64 // refusals seen while calm
			climbs    int     // episodes whose climbs held them
			wantLevel float64 // 0: the limit goes on as it was
		}{
			{"the probe restarts from the level", 10, false, 0, 0, 1000},
			{"from what the index accepted since the climb, when more", 15, false, 0, 0, 1500},
			{"an index that refuses at random: the refusal is its usual share", 10, false, 3, 2, 0},
			{"two refusals while calm are no share yet (a bucket refilling late)", 10, false, 2, 2, 1000},
			{"refusals of one climb are no share yet (a capacity that fell)", 10, false, 3, 1, 1000},
			{"no probe while the limit climbs back", 10, true, 0, 0, 0},
		} {
			s := capScript(t, 1000)
			s.c.quiet = usualRefusals{answers: 1000, refused: tt.noise, climbs: tt.climbs}
			if tt.climbing {
				s.c.limit, s.c.depth = 800, 0.2
				s.c.origin = s.now.Add(time.Hour) // far from back
			}
			s.run(7*s.tn.recovery/4, 10*time.Millisecond, tt.amount, nil) // the probe at 1.8 times the level, short of probeSearch's
			before := s.c.limit
			require.Equal(t, rateNoise, s.answer(tt.amount, true, 10*time.Millisecond), tt.name)
			if tt.wantLevel == 0 {
				assert.GreaterOrEqual(t, s.c.limit, before, tt.name)
				continue
			}
			assert.Less(t, s.c.limit, before, tt.name)
			assert.InDelta(t, tt.wantLevel, s.c.level, 0.02*tt.wantLevel, tt.name)
			assert.Equal(t, s.c.level, s.c.limit, tt.name)
		}
	})
	t.Run("refusals while the limit climbs back teach the usual share", func(t *testing.T) {
		s := capScript(t, 1000)
		s.c.capacity = 2000 // still far below what the index accepted
		s.run(2*defaultTuning.drainFor, 10*time.Millisecond, 8, nil)
		seen := s.run(time.Second, 10*time.Millisecond, 8, func(i int) bool { return i%40 == 0 })
		assert.Zero(t, seen[rateCut])
		assert.Equal(t, 3.0, s.c.quiet.refused)
		assert.Positive(t, s.c.noise(&s.tn))
	})
	t.Run("refusals while the lane sends well under what the index accepted teach the usual share, climbing or not", func(t *testing.T) {
		oneIn40 := func(i int) bool { return i%40 == 0 }
		for _, tt := range []struct {
			name   string
			amount float64 // per 10 ms, against a capacity of 1,000 a second
			refuse func(i int) bool
			want   float64 // refusals counted as the usual share
		}{
			{"half the capacity: a token bucket refuses none of it", 5, oneIn40, 3},
			{"near the capacity, above the cut's limit: refusals may be the bucket's", 9, oneIn40, 0},
			{"refusals in a row: a bucket that overflows, the capacity fell", 5, func(i int) bool { return i < 3 }, 1},
		} {
			s := capScript(t, 1000)
			s.c.limit = 1500 // back above the capacity: not climbing
			s.run(2*defaultTuning.drainFor, 10*time.Millisecond, tt.amount, nil)
			s.run(time.Second, 10*time.Millisecond, tt.amount, tt.refuse)
			assert.Equal(t, tt.want, s.c.quiet.refused, tt.name)
		}
	})
	t.Run("a cut after a search takes √2/2 of the limit at its first refusal, not of the one it doubled to since", func(t *testing.T) {
		for _, tt := range []struct {
			name    string
			refused bool // a refusal that starts no episode when the search is at 1000
			want    float64
		}{
			{"no refusal before the episode: the limit the search reached", false, 4000 * math.Sqrt2 / 2},
			{"a refusal at 1000, two doublings before the episode", true, 1000 * math.Sqrt2 / 2},
		} {
			s := capScript(t, 1000)
			s.c.capacity, s.c.search.pace = 0, s.tn.minWindow
			s.run(s.tn.drainFor, 10*time.Millisecond, 0.1, nil) // 10 a second: far under either measure
			s.c.limit = 1000
			if tt.refused {
				require.Equal(t, rateNoise, s.answer(0.1, true, 10*time.Millisecond))
			}
			s.run(2*s.tn.minWindow, 10*time.Millisecond, 0.1, nil) // two doublings
			require.InDelta(t, 4000, s.c.limit, 400)
			s.c.limit = 4000
			require.Equal(t, rateCut, s.pattern("x..x..x", 0.1), tt.name)
			assert.InDelta(t, tt.want*(1-s.tn.cutDepth), s.c.limit, 1, tt.name)
		}
	})
	t.Run("with nothing accepted since the last cut the limit halves what was sent and searches", func(t *testing.T) {
		s := capScript(t, 1000)
		s.now = s.now.Add(2 * defaultTuning.drainFor)
		for range 3 {
			s.c.send(s.now, 10)
		}
		s.c.limit = s.c.level
		assert.Equal(t, rateHalved, s.answer(10, true, 10*time.Millisecond))
		assert.Equal(t, s.tn.minWindow, s.c.search.pace)
	})
}

// capScript returns a script whose controller was just cut to r: level r,
// on its plateau, after a first episode.
func capScript(t *testing.T, r float64) *rateScript {
	s := newRateScript(t)
	c := &s.c
	c.limit, c.level, c.capacity, c.depth = r, r, r, 0
	c.cutAt, c.origin, c.followed, c.cutSeq = s.now, s.now, s.now, s.seq
	c.episodes = 1
	return s
}

// TestEpisodeStart covers rateControl.leastRefusals (closeAnswers 16)
// before the first episode, while the limit climbs back after a cut and
// while it searches up from a floor (after a second of answers accepted):
// '.' is an answer accepted, 'x' one refused, 10 ms apart, and want is
// what the controller did with the last.
func TestEpisodeStart(t *testing.T) {
	const (
		first = iota
		climbing
		searching
	)
	for _, tt := range []struct {
		name, answers string
		state         int
		want          rateReason
	}{
		{"one refusal", "..........x", first, rateNoise},
		{"two apart: random refusals come so", "x.........x", first, rateNoise},
		{"two in a row: a bucket that overflows refuses so", "..........xx", first, rateFirstCut},
		{"three apart", "x....x....x", first, rateFirstCut},
		{"three within the last 16", "x......x......x", first, rateFirstCut},
		{"three spread wider: random refusals spread over the run", "x..........x..........x", first, rateNoise},
		{"two in a row after one apart", "x.........xx", first, rateFirstCut},
		{"climbing, two in a row: fewer than three teach the usual share", "..........xx", climbing, rateNoise},
		{"climbing, three within the last 16: a bucket that overflows refuses so", "x......x......x", climbing, rateCut},
		{"climbing, three spread wider", "x..........x..........x", climbing, rateNoise},
		{"searching, two apart: no usual share learnt yet, random refusals come so", "x.........x", searching, rateNoise},
		{"searching, three within the last 16: the search passed the bucket's rate", "x......x......x", searching, rateCut},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newRateScript(t)
			switch tt.state {
			case climbing:
				s = capScript(t, 1000)
				s.c.capacity = 1250 // the last cut's measure: the limit climbs back to it
				s.bound = false     // the limit holds nothing back: the curve stays put
				s.run(s.tn.drainFor, 10*time.Millisecond, 10, nil)
				require.True(t, s.c.climbing())
			case searching:
				s = capScript(t, 1000)
				s.c.capacity = 0 // a first cut's floor, guessed: nothing to climb back to
				s.c.search.pace = s.tn.firstSearchFor
				s.bound = false // the search holds nothing back: it stays where it is
				// A few answers since the cut: the register holds few.
				s.run(50*time.Millisecond, 10*time.Millisecond, 10, nil)
				require.False(t, s.c.climbing())
			}
			assert.Equal(t, tt.want, s.pattern(tt.answers, 10))
		})
	}
}

// TestAfterFirstCut covers rateControl.afterFirstCut: a window that
// reaches back before the first cut is cut short to the time since it.
func TestAfterFirstCut(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name     string
		firstCut time.Time
		want     time.Duration
	}{
		{"before the first cut", time.Time{}, 2 * time.Second},
		{"a young run", now.Add(-300 * time.Millisecond), 300 * time.Millisecond},
		{"a run older than the window", now.Add(-5 * time.Second), 2 * time.Second},
		{"under a meter bucket: too few answers to measure by", now.Add(-50 * time.Millisecond), 2 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := rateControl{start: runStart{firstCut: tt.firstCut}}
			assert.Equal(t, tt.want, c.afterFirstCut(now, 2*time.Second))
		})
	}
	t.Run("a cut in a young run measures its rate since the first, not diluted by the window", func(t *testing.T) {
		s := newRateScript(t)
		s.tn.minWindow = 2 * time.Second // the window reaches before the run began
		s.run(200*time.Millisecond, 10*time.Millisecond, 100, nil)
		s.answer(0, true, 0)
		require.Equal(t, rateFirstCut, s.answer(100, true, 10*time.Millisecond))
		s.c.search = rateSearch{} // measured as a cut, not a search's
		s.run(500*time.Millisecond, 10*time.Millisecond, 50, nil)
		s.answer(0, true, 0)
		s.answer(0, true, 0) // three refusals among the answers since the cut
		require.Equal(t, rateCut, s.answer(50, true, 10*time.Millisecond))
		assert.InDelta(t, 5000, s.c.level, 500, "50 records every 10 ms since the first cut")
	})
}

func TestRateCurve(t *testing.T) {
	tn := defaultTuning
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := rateControl{level: 1000, depth: 0.15}
	c.origin = now.Add(c.climb(&tn))
	tests := []struct {
		name string
		at   time.Duration
		want func(r float64) bool
	}{
		{"at the cut, the cut's depth under the level", 0, func(r float64) bool { return math.Abs(r-850) < 1 }},
		{"before the cut (a clock read before it), at the cut's limit, not under", -time.Minute, func(r float64) bool { return math.Abs(r-850) < 1 }},
		{"half way, more than half way back (concave)", c.climb(&tn) / 2, func(r float64) bool { return r > 925 && r < 1000 }},
		{"one climb after the cut, at the level", c.climb(&tn), func(r float64) bool { return math.Abs(r-1000) < 1e-6 }},
		{"one recovery above, probeGain above the level", c.climb(&tn) + tn.recovery, func(r float64) bool { return math.Abs(r-1000*(1+tn.probeGain)) < 1e-6 }},
		{"two recoveries above, eight times that (convex)", c.climb(&tn) + 2*tn.recovery, func(r float64) bool { return math.Abs(r-1000*(1+8*tn.probeGain)) < 1e-6 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := c.curve(now.Add(tt.at), &tn)
			assert.True(t, tt.want(r), "%v after the cut: %.1f", tt.at, r)
		})
	}
	t.Run("a deeper cut climbs back for longer, as the cube root of its depth", func(t *testing.T) {
		deep := rateControl{depth: 8 * tn.recoveryDepth}
		assert.Equal(t, 2*tn.recovery, deep.climb(&tn))
	})
	t.Run("a probe that doubled the level unrefused searches up from there", func(t *testing.T) {
		for _, tt := range []struct {
			name        string
			probeSearch float64
			search      time.Duration
		}{
			{"twice the level: the capacity rose, a search goes on from the limit", 2, tn.recovery},
			{"without the rule: the cubic goes on from the old level", math.Inf(1), 0},
		} {
			s := capScript(t, 1000)
			s.tn.probeSearch = tt.probeSearch
			s.run(4*time.Second, 10*time.Millisecond, 1, nil) // the cubic passes twice the level after 1.88 recoveries
			assert.Equal(t, tt.search, s.c.search.pace, tt.name)
			if tt.search == 0 {
				assert.Equal(t, 1000.0, s.c.level, tt.name)
				continue
			}
			assert.Equal(t, s.c.limit, s.c.level, tt.name)
			from := s.c.limit
			s.run(tn.recovery, 10*time.Millisecond, 1, nil)
			assert.InDelta(t, 2*from, s.c.limit, 0.05*from, "%s: doubling once a recovery", tt.name)
		}
	})
	t.Run("a cap that binds nothing holds the curve where it is", func(t *testing.T) {
		s := capScript(t, 1000)
		s.bound = false
		s.run(10*time.Second, 10*time.Millisecond, 1, nil)
		assert.InDelta(t, 1000, s.c.limit, 1e-9)
		s.bound = true
		s.run(tn.recovery, 10*time.Millisecond, 1, nil)
		assert.InDelta(t, 1000*(1+tn.probeGain), s.c.limit, 1)
	})
}

// A lane that rests, nothing in flight and nothing held back, holds its
// curve where it is over the rest; only the part of the rest after the
// curve was last followed is the rest's to shift. What the index accepted
// is still measured over it.
func TestRateRestHoldsTheCurve(t *testing.T) {
	tn := defaultTuning
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name               string
		followed, from, to time.Duration // after at
		shift              time.Duration
	}{
		{"followed before the rest: the whole rest", 0, time.Second, time.Minute, time.Minute - time.Second},
		{"followed during the rest: the rest after it", 10 * time.Second, time.Second, time.Minute, 50 * time.Second},
		{"followed after the rest: nothing", 2 * time.Minute, time.Second, time.Minute, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := rateControl{level: 1000, limit: 1000, origin: at, followed: at.Add(tt.followed)}
			c.climbed.at = at
			before := c.curve(at.Add(tt.to), &tn)
			c.rest(at.Add(tt.from), at.Add(tt.to))
			assert.Equal(t, at.Add(tt.shift), c.origin)
			assert.Equal(t, at.Add(tt.followed+tt.shift), c.followed)
			assert.Zero(t, c.climbed.paused, "what the index accepted is measured over the rest: its bucket refilled")
			if tt.shift > 0 {
				assert.Less(t, c.curve(at.Add(tt.to), &tn), before, "the curve did not climb over the rest")
			}
		})
	}
	t.Run("without the rule, a minute of rest climbs the curve a thousandfold", func(t *testing.T) {
		c := rateControl{level: 1000, limit: 1000, origin: at, followed: at}
		assert.Greater(t, c.curve(at.Add(time.Minute), &tn), 1e6)
	})
}

func TestPoissonTail(t *testing.T) {
	for _, tt := range []struct {
		lambda float64
		k      int
		want   float64
	}{
		{0, 0, 1},
		{0, 1, 0},
		{1, 1, 1 - math.Exp(-1)},
		{2, 3, 1 - 5*math.Exp(-2)},
	} {
		assert.InDelta(t, tt.want, poissonTail(tt.lambda, tt.k), 1e-12, "λ=%v k=%d", tt.lambda, tt.k)
	}
}

// guessed and measured are the paces of a search from a first floor
// guessed from the start and from one measured under what the index
// accepted (or a later cut's).
func guessed(tn *tuning) time.Duration  { return tn.firstSearchFor }
func measured(tn *tuning) time.Duration { return tn.minWindow }
