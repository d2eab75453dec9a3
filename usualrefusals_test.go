package upsert

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestUsualRefusalsShare(t *testing.T) {
	tn := defaultTuning
	for _, tt := range []struct {
		name  string
		seen  usualRefusals
		share float64
	}{
		{"nothing seen: one in noiseAnswers", usualRefusals{}, 1 / tn.noiseAnswers},
		{"a bucket refilling late refuses a couple", usualRefusals{answers: 64, refused: 2, climbs: 2}, 1 / tn.noiseAnswers},
		{"refusals of one climb: a capacity that fell during it", usualRefusals{answers: 100, refused: 5, climbs: 1}, 1 / tn.noiseAnswers},
		{"refusals in two climbs: the index's own, over randomAnswers", usualRefusals{answers: 100, refused: 5, climbs: 2}, 5 / tn.randomAnswers},
		{"many answers: the share seen, not pulled down by the prior", usualRefusals{answers: 1000, refused: 40, climbs: 3}, 0.04},
		{"a clean index, long watched", usualRefusals{answers: 10_000}, 1 / 10_000.0},
		{"three refusals among many", usualRefusals{answers: 4 * tn.noiseAnswers, refused: 3, climbs: 2}, 3 / (4 * tn.noiseAnswers)},
	} {
		assert.InDelta(t, tt.share, tt.seen.share(&tn), 1e-9, tt.name)
	}
}

func TestUsualRefusalsAdd(t *testing.T) {
	type answer struct {
		refused bool
		episode int
	}
	for _, tt := range []struct {
		name       string
		answers    []answer
		wantClimbs int
		random     bool
	}{
		{"accepted answers count no climb", []answer{{false, 1}, {false, 2}}, 0, false},
		{"refusals of one climb count once", []answer{{true, 1}, {true, 1}, {true, 1}}, 1, false},
		{"refusals in two climbs", []answer{{true, 1}, {false, 2}, {true, 2}, {true, 2}}, 2, true},
		{"two climbs, two refusals: a bucket refilling late", []answer{{true, 1}, {true, 2}}, 2, false},
	} {
		var u usualRefusals
		for _, a := range tt.answers {
			u.add(a.refused, a.episode, &defaultTuning)
		}
		assert.Equal(t, tt.wantClimbs, u.climbs, tt.name)
		assert.Equal(t, tt.random, u.random(), tt.name)
	}
	t.Run("past four times noiseAnswers the counts halve: the index may change", func(t *testing.T) {
		u := usualRefusals{answers: 4 * defaultTuning.noiseAnswers, refused: 40, climbs: 2, lastClimb: 2}
		u.add(true, 2, &defaultTuning)
		assert.Equal(t, (4*defaultTuning.noiseAnswers+1)/2, u.answers)
		assert.Equal(t, 20.5, u.refused)
		assert.Equal(t, 2, u.climbs)
	})
}
