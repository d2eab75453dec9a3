package main

import (
	"fmt"
	"math/rand/v2"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"
)

// The shape of the simulated log.
const (
	partitions       = 4
	perPartition     = 800
	keysPerPartition = 250 // so that keys are updated again and again
	namespaces       = 3
	dimension        = 8
)

// message is one record of the log: a change of a key, at an offset of
// the key's partition. Its vector's first value is its offset, so that
// what the index holds for a key says which change it is.
type message struct {
	partition, offset, key int
	vec                    *pinecone.Vector
}

// topic is the log: its partitions, and the ids the index refuses.
type topic struct {
	parts    [][]message
	poisoned []string
}

// makeTopic makes the log of seed. A key belongs to one partition (key
// modulo the partitions), as a Kafka producer's default partitioner does;
// one record in 150 has the wrong dimension, and two keys are refused by
// the index.
func makeTopic(seed int64) topic {
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	t := topic{parts: make([][]message, partitions), poisoned: []string{idOf(5), idOf(10)}}
	for p := range t.parts {
		t.parts[p] = make([]message, perPartition)
		for o := range t.parts[p] {
			key := p + partitions*rng.IntN(keysPerPartition)
			dim := dimension
			if rng.IntN(150) == 0 {
				dim-- // refused before sending
			}
			vals := make([]float32, dim)
			vals[0], vals[1] = float32(o), float32(p)
			for i := 2; i < dim; i++ {
				vals[i] = rng.Float32()
			}
			t.parts[p][o] = message{partition: p, offset: o, key: key, vec: &pinecone.Vector{Id: idOf(key), Values: &vals}}
		}
	}
	return t
}

func idOf(key int) string { return fmt.Sprint("key-", key) }

func namespaceOf(key int) string { return fmt.Sprint("tenant-", key%namespaces) }

// vectorNamespace routes a record to its key's namespace.
func vectorNamespace(v *pinecone.Vector) string {
	var key int
	_, _ = fmt.Sscanf(v.Id, "key-%d", &key) // every id is idOf's
	return namespaceOf(key)
}

func (t topic) records() int { return partitions * perPartition }

func (t topic) keys() int {
	seen := map[int]bool{}
	for _, part := range t.parts {
		for _, m := range part {
			seen[m.key] = true
		}
	}
	return len(seen)
}

func (t topic) lengths() []int {
	n := make([]int, len(t.parts))
	for p := range t.parts {
		n[p] = len(t.parts[p])
	}
	return n
}
