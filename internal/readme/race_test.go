//go:build race

package readme_test

const raceEnabled = true
