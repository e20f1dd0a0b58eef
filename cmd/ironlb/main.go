// Command ironlb gives bare-metal Kubernetes clusters Services of type LoadBalancer. One binary, roles as
// subcommands; `ironlb lab` runs the seeds' cluster on one machine.
package main

import (
	"os"

	"github.com/ironlb/ironlb/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
