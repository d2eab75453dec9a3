package upsert

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEpisodeCount(t *testing.T) {
	for _, tc := range []struct {
		name              string
		episodes          int
		climbing          bool
		quietAnswers      float64 // answers seen while climbing back
		quietRefused      float64 // refusals among them
		refusals, answers int
	}{
		{name: "a clean index: two refusals close together, not three among answerSpan",
			episodes: 1, refusals: 2, answers: 38},
		{name: "a lane's first episode: two as well",
			refusals: 2, answers: 38},
		{name: "climbing back: three, its own rules' least",
			episodes: 1, climbing: true, refusals: 3, answers: answerSpan},
		{name: "an index that refuses 3% anyway: five among 42, not seven among answerSpan",
			episodes: 1, quietAnswers: 1000, quietRefused: 30, refusals: 5, answers: 42},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := rateControl{episodes: tc.episodes, limit: 100, capacity: 100}
			if tc.climbing {
				c.capacity = 200
			}
			c.quiet = usualRefusals{answers: tc.quietAnswers, refused: tc.quietRefused, climbs: 2}
			r, n := c.episodeCount(&defaultTuning)
			assert.Equal(t, tc.refusals, r)
			assert.Equal(t, tc.answers, n)
			lambda := c.noise(&defaultTuning) * float64(n)
			assert.Less(t, poissonTail(lambda, r), defaultTuning.significance, "as rare by chance as the test asks")
		})
	}
}
