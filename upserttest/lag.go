package upserttest

import "time"

// newVectors is a write that added n vectors, or records (which Pinecone
// stores as vectors), to a namespace at a time, which DescribeIndexStats
// counts only WithStatsLag later.
type newVectors struct {
	at        time.Time
	namespace string
	n         int
}

// noteNewVectors records that n vectors or records were added to
// namespace now, when the stats lag; s.mu is held.
func (s *Server) noteNewVectors(namespace string, n int) {
	if s.cfg.statsLag <= 0 || n == 0 {
		return
	}
	s.recent = append(s.recent, newVectors{at: s.cfg.now(), namespace: namespace, n: n})
}

// uncounted returns, per namespace, the vectors and records that
// DescribeIndexStats does not count yet, and forgets the writes old enough
// to count; s.mu is held.
func (s *Server) uncounted() map[string]int {
	if len(s.recent) == 0 {
		return nil
	}
	since := s.cfg.now().Add(-s.cfg.statsLag)
	old := 0
	for old < len(s.recent) && !s.recent[old].at.After(since) {
		old++
	}
	s.recent = s.recent[old:]
	out := make(map[string]int)
	for _, w := range s.recent {
		out[w.namespace] += w.n
	}
	return out
}
