package main

import (
	"slices"
	"sync"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/upserttest"
)

// deadLetter is a record that failed for good, kept with its cause.
type deadLetter struct {
	m     *message
	class upsert.Class
	err   string
}

// commitStore is what the consumer commits, in one step: the offset of
// each partition, and the dead letters and records to recheck below
// them (Kafka's offsets with a dead-letter topic written in the same
// transaction, or one row of a database). It also audits each commit
// against the index, which only this example can see.
type commitStore struct {
	topic topic
	srv   *upserttest.Server

	mu      sync.Mutex
	offsets []int // the next offset to read, per partition
	dead    map[*message]deadLetter
	recheck map[*message]bool
	early   int // records committed while neither stored nor dead-lettered
}

func newCommitStore(t topic, srv *upserttest.Server) *commitStore {
	return &commitStore{topic: t, srv: srv, offsets: make([]int, partitions), dead: map[*message]deadLetter{}, recheck: map[*message]bool{}}
}

func (s *commitStore) offsetsNow() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.offsets)
}

// commit commits next as the offsets, with the dead letters and records to
// recheck acked below them. replaced are the records among them that a
// later record of their key replaced before they were sent, for the audit.
func (s *commitStore) commit(next []int, dead []deadLetter, recheck, replaced []*message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range dead {
		s.dead[d.m] = d
	}
	for _, m := range recheck {
		s.recheck[m] = true
	}
	for p, to := range next {
		for o := s.offsets[p]; o < to; o++ {
			m := &s.topic.parts[p][o]
			if !s.handled(m) && !slices.Contains(replaced, m) {
				s.early++
			}
		}
		s.offsets[p] = max(s.offsets[p], to)
	}
}

// handled reports whether m is dead-lettered, to recheck, or on the
// index: the index holds its key's change at m's offset or a later one.
func (s *commitStore) handled(m *message) bool {
	if _, ok := s.dead[m]; ok || s.recheck[m] {
		return true
	}
	v, ok := s.srv.Vector(namespaceOf(m.key), m.vec.Id)
	return ok && int((*v.Values)[0]) >= m.offset
}

// lost counts, once the log is consumed and the index is quiet, the
// records that are not handled: past a committed offset, or neither on the
// index nor dead-lettered nor to recheck, and no later change of their key
// is either of those two (the key's source is read again, or its failure
// kept: a record replaced before it was sent, or one that a late write
// undid, needs nothing more then).
func (s *commitStore) lost() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	lost := 0
	for p, part := range s.topic.parts {
		lost += len(part) - s.offsets[p]
		for o := range s.offsets[p] {
			m := &part[o]
			if !s.handled(m) && !s.keptLater(m) {
				lost++
			}
		}
	}
	return lost
}

// keptLater reports whether a later change of m's key is dead-lettered or
// to recheck.
func (s *commitStore) keptLater(m *message) bool {
	for _, later := range s.topic.parts[m.partition][m.offset+1:] {
		lm := &s.topic.parts[m.partition][later.offset]
		if _, dead := s.dead[lm]; later.key == m.key && (dead || s.recheck[lm]) {
			return true
		}
	}
	return false
}
