// Package minmax keeps the minimum of the latest samples of a signal, in
// fixed memory: the baseline a latency is compared with.
package minmax

// Window holds the minimum of the latest Size samples. The zero value holds
// nothing; Min of an empty window is 0.
type Window struct {
	samples [size]float64
	n       int // samples recorded, up to size
	next    int
}

const size = 32

// Add records x, forgetting the oldest sample once the window is full.
func (w *Window) Add(x float64) {
	w.samples[w.next] = x
	w.next = (w.next + 1) % size
	w.n = min(w.n+1, size)
}

// Min returns the smallest of the samples held, or 0 when empty.
func (w *Window) Min() float64 {
	if w.n == 0 {
		return 0
	}
	m := w.samples[0]
	for _, x := range w.samples[1:w.n] {
		m = min(m, x)
	}
	return m
}

// Len returns how many samples are held.
func (w *Window) Len() int { return w.n }

// Reset forgets every sample.
func (w *Window) Reset() { *w = Window{} }
