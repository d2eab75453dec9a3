package upsert

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestConcControlFirstWave(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Millisecond
		}
		return d
	}
	tests := []struct {
		name    string
		latency []time.Duration // of the first four requests, in the order sent
		edit    func(i int, s *concSample)
		want    int // the level after the wave
	}{
		{name: "one slot answers each a service time after the one before", latency: ms(100, 200, 300, 400), want: 1},
		{name: "one slot with jitter, each at least half the first's latency later", latency: ms(100, 160, 300, 360), want: 1},
		{name: "parallel slots answer within their jitter, in any order", latency: ms(100, 130, 90, 120), want: 4},
		{name: "parallel slots answering in the order sent, but close together", latency: ms(100, 130, 160, 190), want: 4},
		{name: "two slots answer in pairs: not read", latency: ms(100, 100, 200, 200), want: 4},
		{name: "a failure breaks the wave", latency: ms(100, 200, 300, 400), want: 4,
			edit: func(i int, s *concSample) {
				if i == 1 {
					s.class = ClassServer
				}
			}},
		{name: "a partial batch breaks the wave", latency: ms(100, 200, 300, 400), want: 4,
			edit: func(i int, s *concSample) { s.full = i != 2 }},
		{name: "requests not all sent before the first answer are no wave", latency: ms(100, 200, 300, 400), want: 4,
			edit: func(i int, s *concSample) {
				if i == 0 {
					s.issued = 2
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tn := defaultTuning
			c := newConcControl(&tn)
			var reasons []concReason
			for i, l := range tc.latency {
				// Slots not bound: slow start tries nothing at the end of
				// its first epoch, so the level is the wave's alone.
				s := concSample{seq: uint64(i + 1), issued: 4, latency: l, full: true, mayTry: true, spread: 0.1}
				if tc.edit != nil {
					tc.edit(i, &s)
				}
				reasons = append(reasons, c.answer(s, &tn))
			}
			assert.Equal(t, tc.want, c.limit, "reasons %v", reasons)
			if tc.want < tn.startConcurrency {
				assert.Equal(t, concSerial, reasons[len(reasons)-1])
				assert.True(t, c.slowStart, "slow start goes on from the slots shown")
				assert.Equal(t, uint64(4), c.seq, "the level applies to requests admitted after the wave")
			}
		})
	}
}

// A wave misread on a jittery parallel index costs a few doublings: slow
// start climbs back from the level it showed.
func TestConcControlFirstWaveMisreadClimbsBack(t *testing.T) {
	s := newConcScript()
	for i, l := range []time.Duration{100, 200, 300, 400} {
		s.issued++
		s.c.answer(concSample{seq: uint64(i + 1), issued: 4, latency: l * time.Millisecond, full: true, slotBound: true, mayTry: true, spread: 0.1}, &s.tn)
	}
	assert.Equal(t, 1, s.c.limit)
	s.answers(200, slots(64, 100*time.Millisecond), nil)
	assert.GreaterOrEqual(t, s.c.limit, 16)
}
