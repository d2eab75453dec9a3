package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/pinecone-io/go-pinecone/v5/pinecone"

	"github.com/upsertlib/upsert"
	"github.com/upsertlib/upsert/ndjson"
)

// A record of an id of which an earlier run left a letter in the
// dead-letter file, for a record that may have landed (a may-be-stale
// letter, ndjson.StaleClass, or a failure without an answer) or that this
// run sends again (past the checkpoint), is exposed, in a run that appends
// to that file, as a later record of such an id is within the run that
// wrote the letter (upsert.Stale): replaying the file, as the report of
// that run says to, upserts the letter's record again, so a later record
// of its id that lands without a letter after it would be undone by the
// replay. Such a record gets a may-be-stale letter too when it lands,
// and the replay ends on the input's last record of the id that the runs
// sent, as it does within one run.
//
// The letters of those ids, of failed and landed records alike, are
// written in input order, as each record is acknowledged (upsert.WithAcks):
// that a record landed is told by its ack alone, which comes once every
// record before it settled, and a failure's letter written as it settles
// (a record refused before it is sent) could come before the letter of an
// earlier record of its id, still in flight; a replay would then end on
// that earlier record. The letters of those ids are held until their
// records' acks, and the checkpoint is held back to the records
// acknowledged (durableCheckpoint), so that it never passes a record
// whose letter is not written. A run without such letters takes no acks.

// exposure is the ids a run that appends to a dead-letter file exposes
// (exposedIDs), and the letters of the run's records of those ids, held
// until their ack. It is safe for concurrent use.
type exposure struct {
	// ids maps each id, in the run's namespace, to the position ("index")
	// of the record its last such letter holds, the earlier record of a
	// letter of a later one.
	ids       map[letterKey]int
	namespace string              // the run's, which its letters name
	write     func(exposedLetter) // writes a letter to the dead-letter file
	// message returns the error of the letter of a landed record that
	// the library did not report stale.
	message func(upsert.Stale) string
	// acked is the position up to which every record was acknowledged,
	// its letter written: how far the checkpoint may go.
	acked atomic.Int64
	// wanted is the furthest position the library asked the checkpoint to
	// save (durableCheckpoint.Save), which a save held back to acked must
	// reach once the run is over.
	wanted atomic.Int64

	mu       sync.Mutex
	kept     map[int]*pinecone.Vector // records of those ids taken, by position, until their ack
	held     map[int]exposedLetter    // their letters from the observers, until their ack
	lettered int                      // letters of landed records that the library did not report stale
}

// exposedLetter is a dead letter of a record of an exposed id: of a
// failure (failure set), or of a record that may be stale.
type exposedLetter struct {
	failure *upsert.Failure
	stale   upsert.Stale
	msg     string // the stale letter's error
}

// newExposure returns the exposure of the ids of ids for a run that
// resumes from position from, writing to namespace, whose letters write
// writes, message giving the error of those of landed records; nil when
// ids is empty.
func newExposure(ids map[letterKey]int, from int64, namespace string, write func(exposedLetter), message func(upsert.Stale) string) *exposure {
	if len(ids) == 0 {
		return nil
	}
	x := &exposure{ids: ids, namespace: namespace, write: write, message: message,
		kept: make(map[int]*pinecone.Vector), held: make(map[int]exposedLetter)}
	x.acked.Store(from)
	x.wanted.Store(from)
	return x
}

// holds reports whether id is exposed; false for a nil exposure.
func (x *exposure) holds(id string) bool {
	if x == nil {
		return false
	}
	_, ok := x.ids[x.key(id)]
	return ok
}

// key is the key of id in the run's namespace.
func (x *exposure) key(id string) letterKey {
	return letterKey{namespace: namespaceName(x.namespace), id: id}
}

// take keeps v, the record at position index, taken by the run, if its id
// is exposed: its ack says whether it landed, not what it was.
func (x *exposure) take(index int, v *pinecone.Vector) {
	if x.holds(v.Id) {
		x.mu.Lock()
		x.kept[index] = v
		x.mu.Unlock()
	}
}

// hold holds l, the letter of the record at position index of id, until
// the record's ack, and reports whether it did: false when id is not
// exposed, and l is to be written now.
func (x *exposure) hold(index int, id string, l exposedLetter) bool {
	if !x.holds(id) {
		return false
	}
	x.mu.Lock()
	x.held[index] = l
	x.mu.Unlock()
	return true
}

// ack is the upsert.WithAcks function: it writes the letters of the
// records acknowledged, in input order, those held, and a may-be-stale
// letter of each landed record of an exposed id that has none, then moves
// acked past them.
func (x *exposure) ack(acks []upsert.Ack) {
	for _, a := range acks {
		x.mu.Lock()
		l, held := x.held[a.Position]
		v, kept := x.kept[a.Position]
		delete(x.held, a.Position)
		delete(x.kept, a.Position)
		landed := !held && kept && a.Landed()
		if landed {
			x.lettered++
		}
		x.mu.Unlock()
		if landed {
			st := upsert.Stale{Index: a.Position, ID: a.ID, Namespace: x.namespace, Record: v, Earlier: x.ids[x.key(a.ID)]}
			l, held = exposedLetter{stale: st, msg: x.message(st)}, true
		}
		if held {
			x.write(l)
		}
	}
	if n := len(acks); n > 0 {
		x.acked.Store(int64(acks[n-1].Position + 1))
	}
}

// savable returns how far a checkpoint asked to save n may go now: to the
// records acknowledged, whose letters are written. It remembers n for
// owed. A nil exposure holds nothing back.
func (x *exposure) savable(n int64) int64 {
	if x == nil {
		return n
	}
	for w := x.wanted.Load(); n > w; w = x.wanted.Load() {
		if x.wanted.CompareAndSwap(w, n) {
			break
		}
	}
	return min(n, x.acked.Load())
}

// owed returns how far the checkpoint may go once the run is over, every
// record acknowledged: to the furthest position it was asked to save; 0
// for a nil exposure.
func (x *exposure) owed() int64 {
	if x == nil {
		return 0
	}
	return min(x.wanted.Load(), x.acked.Load())
}

// landedLetters returns how many landed records got a letter that the
// library did not report stale; 0 for a nil exposure.
func (x *exposure) landedLetters() int {
	if x == nil {
		return 0
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.lettered
}

// letterKey is an id in a namespace, as namespaceName spells it: the
// letters of one id in two namespaces are of two records.
type letterKey struct{ namespace, id string }

// earlierLetters is what exposedIDs reads of a dead-letter file.
type earlierLetters struct {
	ids map[letterKey]int // the ids the run exposes, in its namespace
	// late reports a letter, of whatever namespace, whose record may
	// have landed: replacing the file would lose it.
	late bool
	// others are the namespaces other than the run's that record letters
	// name: a replay sends every letter to its one --namespace.
	others map[string]bool
}

// exposedIDs returns the ids a run writing to namespace and resuming
// from position from exposes: those of the dead-letter file's letters of
// that namespace (a letter without one is of the default namespace)
// whose record may have landed
// (a may-be-stale letter, or a failure whose request went unanswered),
// which a late write or a replay may apply after the run's records of the
// id, and those of the letters of records at or past from, which the run
// sends again; each with the position ("index") of the record its last
// such letter holds. A letter of another namespace exposes nothing (an
// unanswered request to it cannot touch the run's records); it is in
// others.
// None when path is not a regular file (a device, a pipe, or no file).
// The file is read a line at a time, and only the ids kept. A line that
// is no record's letter (the letter of a bad line, a line a killed run
// cut short, one longer than a replay reads) is passed over.
func exposedIDs(path string, from int64, namespace string) (earlierLetters, error) {
	e := earlierLetters{ids: make(map[letterKey]int), others: make(map[string]bool)}
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return e, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return e, err
	}
	defer f.Close()
	namespace = namespaceName(namespace)
	r := ndjson.NewReader(f) // a replay reads the file so: the same lines, the same limit
	for {
		_, err := r.Next()
		var bad *ndjson.LineError
		switch {
		case errors.Is(err, io.EOF):
			return e, nil
		case err != nil && !errors.As(err, &bad):
			return e, err
		}
		l, ok := recordLetter(r.Raw()) // whatever the Reader made of the record
		if !ok {
			continue
		}
		e.late = e.late || l.mayHaveLanded()
		ns := l.namespace()
		if ns != namespace {
			e.others[ns] = true
			continue
		}
		if !l.mayHaveLanded() && int64(l.Index) < from {
			continue
		}
		k := letterKey{namespace: ns, id: l.ID}
		e.ids[k] = max(e.ids[k], l.Index)
	}
}

// letterFields are the fields of a record's dead letter that exposedIDs
// reads.
type letterFields struct {
	ID            string `json:"id"`
	Class         string `json:"class"`
	Index         int    `json:"index"`
	MayHaveLanded bool   `json:"may_have_landed"`
	// Namespace is left out for the default namespace; NamespaceBase64
	// holds one that is not UTF-8 (ndjson.DeadLetters.Write).
	Namespace       string `json:"namespace"`
	NamespaceBase64 string `json:"namespace_base64"`
}

// namespace returns the letter's namespace, as namespaceName spells it.
func (l letterFields) namespace() string {
	if b, err := base64.StdEncoding.DecodeString(l.NamespaceBase64); err == nil && len(b) > 0 {
		return string(b)
	}
	return namespaceName(l.Namespace)
}

// mayHaveLanded reports whether the letter's record may have landed.
func (l letterFields) mayHaveLanded() bool { return l.MayHaveLanded || l.Class == ndjson.StaleClass }

// recordLetter decodes line, of a dead-letter file, as the letter of a
// record; ok is false for another line (a bad line's letter has no id).
func recordLetter(line []byte) (l letterFields, ok bool) {
	if !bytes.Contains(line, []byte(`"id"`)) {
		return l, false // not decoded
	}
	if json.Unmarshal(line, &l) != nil || l.ID == "" || l.Class == "" {
		return l, false
	}
	return l, true
}

// exposedMessage is the error of the may-be-stale letter of st, a record
// that landed after an earlier run left a letter of its id in the
// dead-letter file at path (see exposedIDs), which the run appends to,
// whether it resumes that run or its checkpoint settled nothing.
func exposedMessage(in *input, st upsert.Stale, path string) string {
	return fmt.Sprintf("%s: landed after an earlier run left a letter of its id in %s, which this one appends to: "+
		"replaying that letter (or that run's request without an answer, landing late) upserts an earlier record of the id again, "+
		"and this one's letter, after it, upserts this one last; replay the file once the index is quiet", in.where(st.Index, st.ID), path)
}
