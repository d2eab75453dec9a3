package share

import (
	"math"
	"slices"
)

// Allocation returns this writer's part of the lane's rate total (records
// per second), split by demand: each writer is given what it asks for, at
// most an equal split of what is left after the writers that ask for less,
// and what nobody asks for is split equally among all, so that a writer
// below its share can still grow into it (max-min fairness, as
// water-filling). With every demand +Inf, it is total over Writers. A view
// that is not Shared keeps the split of its last exchange with the store,
// so that a writer left alone starts from its part, not the whole; a view
// that names no other writer returns total. It does not allocate: a lane
// may call it per request.
func (v View) Allocation(total float64) float64 {
	if len(v.sorted) <= 1 {
		return total
	}
	level, spare := waterLevel(total, v.sorted)
	return min(v.own, level) + spare
}

// Allocate splits total between the demands (records per second each; +Inf
// for a writer that takes all it is given) as [View.Allocation] does, and
// returns one allocation per demand, in their order; they add up to total.
// NaN and negative demands count as 0.
func Allocate(total float64, demands []float64) []float64 {
	sorted := sortDemands(demands)
	level, spare := waterLevel(total, sorted)
	out := make([]float64, len(demands))
	for i, d := range demands {
		out[i] = min(want(d), level) + spare
	}
	return out
}

// waterLevel returns the most that any writer is given out of total when
// the sorted demands are met from the smallest up (+Inf when every demand
// is met), and what is then left for each writer on top.
func waterLevel(total float64, sorted []float64) (level, spare float64) {
	n := len(sorted)
	if n == 0 || !(total > 0) {
		return 0, 0
	}
	if math.IsInf(total, 1) {
		return total, total // no cap to split
	}
	left := total
	for k, d := range sorted {
		if fair := left / float64(n-k); d >= fair {
			return fair, 0
		}
		left -= d
	}
	return math.Inf(1), left / float64(n)
}

// sortDemands returns the demands as want takes them, in increasing order.
func sortDemands(demands []float64) []float64 {
	out := make([]float64, len(demands))
	for i, d := range demands {
		out[i] = want(d)
	}
	slices.Sort(out)
	return out
}

// want is a demand as the split takes it: NaN and negative ones are 0.
func want(d float64) float64 {
	if d > 0 {
		return d
	}
	return 0
}

// DemandsMoved reports whether the split of v differs from old's: the
// writers are not as many, or a demand (this writer's, or the k-th
// smallest of all) moved by more than tolerance of itself, or between
// finite and +Inf. Demands are records per second, so a split compared at
// one total (say 1) misses what moves it at the lane's; a relative change
// of a demand moves any writer's part by at most that much of the demand.
func (v View) DemandsMoved(old View, tolerance float64) bool {
	if len(v.sorted) != len(old.sorted) || moved(v.own, old.own, tolerance) {
		return true
	}
	for i, d := range v.sorted {
		if moved(d, old.sorted[i], tolerance) {
			return true
		}
	}
	return false
}

// moved reports whether demand a differs from b by more than tolerance of
// the larger.
func moved(a, b, tolerance float64) bool {
	switch {
	case a == b:
		return false
	case math.IsInf(a, 1) || math.IsInf(b, 1):
		return true
	}
	return math.Abs(a-b) > tolerance*max(a, b)
}
