package benchcfg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kubectl runs `ironlb lab kubectl args...` with stdin and returns its combined output.
type Kubectl func(ctx context.Context, stdin string, args ...string) (string, error)

// Apply makes the cluster hold want (Plan) and returns when kubectl has written it, with the time
// just before the first write (for Watch).
func Apply(ctx context.Context, kubectl Kubectl, want []Object) (time.Time, error) {
	out, err := kubectl(ctx, "", "get", strings.Join(Owned, ","), "-n", Namespace, "-o", "name")
	if err != nil {
		return time.Time{}, err
	}
	have, err := ParseNames(out, Namespace)
	if err != nil {
		return time.Time{}, err
	}
	start := time.Now()
	for _, st := range Plan(want, have) {
		o := st.Object
		switch {
		case st.Op == Delete:
			_, err = kubectl(ctx, "", "delete", "-n", o.Namespace, o.String(), "--ignore-not-found", "--wait")
		case !o.Replace:
			_, err = kubectl(ctx, o.Manifest, "apply", "-f", "-")
		default:
			var got string
			got, err = kubectl(ctx, "", "get", "-n", o.Namespace, o.String(), "-o", "name", "--ignore-not-found")
			if err == nil {
				verb := "create"
				if strings.Contains(got, o.String()) { // -o name prints it when it exists
					verb = "replace"
				}
				_, err = kubectl(ctx, o.Manifest, verb, "-f", "-")
			}
		}
		if err != nil {
			return start, fmt.Errorf("benchmark configuration: %s %s: %w", st.Op, o, err)
		}
	}
	return start, nil
}

// ErrRefused wraps the speaker's own words when it refuses the configuration.
var ErrRefused = errors.New("the speaker refuses the benchmark's configuration")

// refusalPolls is how many polls in a row must see a refusal: a ConfigurationState may still say
// Invalid for the configuration before the one just applied, until the speaker has read it.
const refusalPolls = 3

// Watch polls every interval, until ctx ends, for the speakers' refusal of the configuration
// applied at since (Refusal over their ConfigurationStates and their log lines since then), and
// returns an error wrapping ErrRefused with their words once it has seen one refusalPolls times in
// a row. Run it beside the wait for the benchmark's condition, and cancel ctx when that is met.
func Watch(ctx context.Context, kubectl Kubectl, since time.Time, interval time.Duration) error {
	seen := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
		states, _ := kubectl(ctx, "", "get", "configurationstates.metallb.io", "-n", Namespace, "-o", "json")
		logs, _ := kubectl(ctx, "", "logs", "-n", Namespace, "-l", "component=speaker", "--tail=-1", "--prefix",
			"--since-time="+since.UTC().Format(time.RFC3339))
		msg, refused := Refusal([]byte(states), logs)
		if !refused {
			seen = 0
			continue
		}
		if seen++; seen >= refusalPolls {
			return fmt.Errorf("%w:\n%s", ErrRefused, msg)
		}
	}
}
