package share

import (
	"cmp"
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
// that names no other writer returns total.
func (v View) Allocation(total float64) float64 {
	if len(v.demands) <= 1 {
		return total
	}
	return Allocate(total, v.demands)[0]
}

// Allocate splits total between the demands (records per second each; +Inf
// for a writer that takes all it is given) by max-min fairness, and spreads
// what nobody asks for equally over every writer. It returns one allocation
// per demand, in their order; they add up to total. NaN and negative
// demands count as 0.
func Allocate(total float64, demands []float64) []float64 {
	n := len(demands)
	out := make([]float64, n)
	if n == 0 || !(total > 0) {
		return out
	}
	if math.IsInf(total, 1) {
		for i := range out {
			out[i] = total
		}
		return out
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	want := func(i int) float64 {
		if d := demands[i]; d > 0 {
			return d
		}
		return 0
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(want(a), want(b)) })
	left := total
	for k, i := range order {
		out[i] = min(want(i), left/float64(n-k))
		left -= out[i]
	}
	for i := range out {
		out[i] += left / float64(n)
	}
	return out
}
