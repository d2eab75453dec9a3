package share

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAllocate(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name    string
		total   float64
		demands []float64
		want    []float64
	}{
		{"one writer takes it all", 1000, []float64{inf}, []float64{1000}},
		{"equal split when every writer takes all", 1000, []float64{inf, inf, inf, inf}, []float64{250, 250, 250, 250}},
		{"a small demand is met, the rest split", 1000, []float64{100, inf, inf}, []float64{100, 450, 450}},
		{"a demand above an equal split gets the split", 900, []float64{400, inf, inf}, []float64{300, 300, 300}},
		{"what nobody asks for is spread over all", 1000, []float64{100, 200}, []float64{450, 550}},
		{"an idle writer gets what is left over", 1000, []float64{0, inf}, []float64{0, 1000}},
		{"negative and NaN demands count as 0", 1000, []float64{-5, math.NaN(), inf}, []float64{0, 0, 1000}},
		{"order of demands is kept", 1000, []float64{inf, 100, inf}, []float64{450, 100, 450}},
		{"an uncapped lane is uncapped for every writer", inf, []float64{100, inf}, []float64{inf, inf}},
		{"no rate, nothing to split", 0, []float64{inf, inf}, []float64{0, 0}},
		{"no writers", 1000, nil, []float64{}},
		{"every writer quiet: an equal split", 1000, []float64{0, 0, 0, 0}, []float64{250, 250, 250, 250}},
		{"demands that add up to the rate are met", 1000, []float64{100, 300, 600}, []float64{100, 300, 600}},
		{"a NaN rate splits nothing", math.NaN(), []float64{inf, inf}, []float64{0, 0}},
		{"a negative rate splits nothing", -1, []float64{inf, inf}, []float64{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Allocate(tt.total, tt.demands)
			assert.InDeltaSlice(t, tt.want, got, 1e-9)
		})
	}
	t.Run("a thousand writers, some quiet, share the rate exactly", func(t *testing.T) {
		demands := make([]float64, 1000)
		for i := range demands {
			if i%2 == 0 {
				demands[i] = inf
			}
		}
		sum := 0.0
		for i, a := range Allocate(100_000, demands) {
			sum += a
			if i%2 == 1 {
				assert.Zero(t, a, "a quiet writer gets nothing")
			}
		}
		assert.InDelta(t, 100_000, sum, 1e-6)
	})
}

func TestViewAllocation(t *testing.T) {
	inf := math.Inf(1)
	alone := View{Shared: true}.WithDemands(inf, nil)
	assert.Equal(t, 1, alone.Writers)
	assert.Equal(t, 800.0, alone.Allocation(800), "a writer alone takes the whole rate")
	four := View{Shared: true}.WithDemands(inf, []float64{inf, inf, inf})
	assert.Equal(t, 4, four.Writers)
	assert.Equal(t, 200.0, four.Allocation(800))
	four.Shared = false
	assert.Equal(t, 200.0, four.Allocation(800), "a detached writer starts from its last part, not the whole")
	assert.Equal(t, 800.0, View{}.Allocation(800), "a view that names no writers")
}

func TestDemandsMoved(t *testing.T) {
	inf := math.Inf(1)
	two := View{}.WithDemands(inf, []float64{inf})
	tests := []struct {
		name  string
		now   View
		moved bool
	}{
		{"the same demands", View{}.WithDemands(inf, []float64{inf}), false},
		{"another's demand falls", View{}.WithDemands(inf, []float64{100}), true},
		{"a writer joins", View{}.WithDemands(inf, []float64{inf, inf}), true},
		{"its own demand falls", View{}.WithDemands(100, []float64{inf}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.moved, tt.now.DemandsMoved(two, 0.1))
		})
	}
	slow := View{}.WithDemands(inf, []float64{100})
	assert.False(t, View{}.WithDemands(inf, []float64{105}).DemandsMoved(slow, 0.1), "within the tolerance")
	assert.True(t, View{}.WithDemands(inf, []float64{150}).DemandsMoved(slow, 0.1))
	assert.True(t, View{}.WithDemands(inf, []float64{0}).DemandsMoved(slow, 0.1))
}
