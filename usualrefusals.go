package upsert

// usualRefusals counts the answers an index gave while calm (see
// rateControl.calm), when a token bucket refuses nothing: what it refused
// then, it refuses whatever the rate. Its zero value has seen nothing.
type usualRefusals struct {
	answers, refused float64
	climbs           int // episodes whose climbs held a calm refusal
	lastClimb        int // the episode of the last calm refusal
}

// add counts one calm answer given after episode's cut. Past four times
// tuning.noiseAnswers the counts halve: the index may change.
func (u *usualRefusals) add(refused bool, episode int, t *tuning) {
	u.answers++
	if refused {
		u.refused++
		if episode != u.lastClimb {
			u.climbs, u.lastClimb = u.climbs+1, episode
		}
	}
	if u.answers > 4*t.noiseAnswers {
		u.answers, u.refused = u.answers/2, u.refused/2
	}
}

// random reports whether the index refuses at random: three calm
// refusals, in the climbs of two episodes at least. Fewer may be a bucket
// refilling late; refusals of one climb may be a capacity that fell
// during it, and random refusals come back in every climb.
func (u *usualRefusals) random() bool { return u.refused >= 3 && u.climbs >= 2 }

// share is the share of answers the index refuses whatever the rate,
// counted over at least tuning.noiseAnswers answers (those not seen yet
// count as accepted: most indexes refuse nothing, and a few refusals of a
// bucket refilling late must not pass for a share), or
// tuning.randomAnswers once it refuses at random. Until then it is one in
// that many, so that a lone refusal of an index that refused nothing yet
// is no episode (a bucket that overflows refuses several in a row).
func (u *usualRefusals) share(t *tuning) float64 {
	if !u.random() {
		return 1 / max(u.answers, t.noiseAnswers)
	}
	return u.refused / max(u.answers, t.randomAnswers)
}
