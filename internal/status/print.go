package status

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	yaml "go.yaml.in/yaml/v3"
)

// Output formats of Write.
const (
	OutputTable = "table"
	OutputWide  = "wide"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// Formats lists the output formats, for flag help.
var Formats = []string{OutputTable, OutputWide, OutputJSON, OutputYAML}

// Write renders r in format ("" is a table). Errors are the writer's, or an unknown format.
func Write(w io.Writer, r Report, format string) error {
	switch format {
	case "", OutputTable:
		return writeTable(w, r, false)
	case OutputWide:
		return writeTable(w, r, true)
	case OutputJSON:
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	case OutputYAML:
		b, err := toYAML(r)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("unknown output format %q (want one of %s)", format, strings.Join(Formats, ", "))
}

// toYAML renders r as YAML with the JSON field names and order, and counts as exact integers: the
// JSON text is read back as a YAML node tree (JSON is YAML) and printed in block style.
func toYAML(r Report) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	var block func(n *yaml.Node)
	block = func(n *yaml.Node) {
		n.Style = 0
		for _, c := range n.Content {
			block(c)
		}
	}
	block(&doc)
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return out.Bytes(), enc.Close()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeTable(w io.Writer, r Report, wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	if len(r.Addresses) == 0 {
		fmt.Fprintln(tw, "No LoadBalancer Service has an address.")
	} else {
		if wide {
			fmt.Fprintln(tw, "ADDRESS\tSERVICE\tPOOL\tMODE\tNODES\tINTERFACES\tPEERS")
		} else {
			fmt.Fprintln(tw, "ADDRESS\tSERVICE\tPOOL\tMODE\tNODES\tPEERS")
		}
		for _, a := range r.Addresses {
			if wide {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.IP, a.Service, dash(a.Pool), a.Mode,
					dash(strings.Join(nodes(a), ",")), dash(interfaces(a)), dash(peersWide(a)))
			} else {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.IP, a.Service, dash(a.Pool), a.Mode,
					dash(strings.Join(nodes(a), ",")), dash(peers(a)))
			}
		}
	}
	fmt.Fprintln(tw)
	if len(r.Pools) == 0 {
		fmt.Fprintln(tw, "No IPAddressPool.")
	} else {
		if wide {
			fmt.Fprintln(tw, "POOL\tFAMILY\tSIZE\tUSED\tFREE\tSTATUS\tAUTO-ASSIGN\tADDRESSES")
		} else {
			fmt.Fprintln(tw, "POOL\tFAMILY\tSIZE\tUSED\tFREE\tSTATUS")
		}
		for _, p := range r.Pools {
			for _, row := range poolRows(p) {
				if wide {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%t\t%s\n", p.Name, row[0], row[1], row[2], row[3], row[4],
						p.AutoAssign, strings.Join(p.Addresses, ","))
				} else {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, row[0], row[1], row[2], row[3], row[4])
				}
			}
		}
	}
	if len(r.Pending) > 0 {
		fmt.Fprintln(tw)
		if wide {
			fmt.Fprintln(tw, "PENDING\tREASON\tSOURCE\tSINCE\tMESSAGE")
		} else {
			fmt.Fprintln(tw, "PENDING\tREASON\tMESSAGE")
		}
		for _, p := range r.Pending {
			if wide {
				since := "-"
				if p.Since != nil {
					since = p.Since.UTC().Format("2006-01-02T15:04:05Z")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Service, p.Reason, p.Source, since, oneLine(p.Message))
			} else {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Service, p.Reason, oneLine(p.Message))
			}
		}
	}
	return tw.Flush()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// nodes lists the announcing nodes, layer 2 and BGP together, sorted and unique.
func nodes(a Address) []string {
	var out []string
	for _, n := range a.L2Nodes {
		out = append(out, n.Node)
	}
	for _, n := range a.BGPNodes {
		out = append(out, n.Node)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// interfaces lists node:interface for the layer-2 announcements.
func interfaces(a Address) string {
	var out []string
	for _, n := range a.L2Nodes {
		for _, i := range n.Interfaces {
			out = append(out, n.Node+":"+i)
		}
	}
	return strings.Join(out, ",")
}

// peers summarises each peer over the nodes: "router(Established)" when every node's session is in that
// state, "router(Established 1/2)" when only some are, "router" when no state is known.
func peers(a Address) string {
	type tally struct {
		total int
		by    map[string]int
	}
	var names []string
	t := map[string]*tally{}
	for _, n := range a.BGPNodes {
		for _, p := range n.Peers {
			if t[p.Name] == nil {
				t[p.Name] = &tally{by: map[string]int{}}
				names = append(names, p.Name)
			}
			t[p.Name].total++
			if p.BGP != "" {
				t[p.Name].by[p.BGP]++
			}
		}
	}
	slices.Sort(names)
	var out []string
	for _, name := range names {
		c := t[name]
		switch {
		case len(c.by) == 0:
			out = append(out, name)
		case c.by["Established"] == c.total:
			out = append(out, name+"(Established)")
		case len(c.by) == 1:
			for st := range c.by {
				out = append(out, fmt.Sprintf("%s(%s)", name, st))
			}
		default:
			out = append(out, fmt.Sprintf("%s(Established %d/%d)", name, c.by["Established"], c.total))
		}
	}
	return strings.Join(out, ",")
}

// peersWide lists every node's session: "node-a/router=Established,bfd:up".
func peersWide(a Address) string {
	var out []string
	for _, n := range a.BGPNodes {
		for _, p := range n.Peers {
			s := n.Node + "/" + p.Name
			if p.BGP != "" {
				s += "=" + p.BGP
				if p.BFD != "" && p.BFD != "N/A" {
					s += ",bfd:" + p.BFD
				}
			}
			out = append(out, s)
		}
	}
	return strings.Join(out, " ")
}

// poolRows returns a pool's rows: family, size, used, free, status.
func poolRows(p Pool) [][5]string {
	if p.Invalid != "" {
		return [][5]string{{"-", "-", "-", "-", "invalid: " + oneLine(p.Invalid)}}
	}
	var rows [][5]string
	for _, f := range []struct {
		name string
		u    *Usage
	}{{"IPv4", p.IPv4}, {"IPv6", p.IPv6}} {
		if f.u == nil {
			continue
		}
		st := "ok"
		if f.u.Free.Cmp(Count{}) == 0 {
			st = "full"
		}
		rows = append(rows, [5]string{f.name, f.u.Size.String(), f.u.Used.String(), f.u.Free.String(), st})
	}
	return rows
}
