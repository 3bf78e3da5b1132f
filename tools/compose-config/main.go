// compose-config resolves compose files the way `docker compose config --format json` does, with
// compose-go (the library the docker compose CLI loads its files with), and prints the resolved
// model as JSON on stdout:
//
//	compose-config -f docker-compose.yml -f compose.site.yml --env-file .env --profile split
//
// is `docker compose -f docker-compose.yml -f compose.site.yml --env-file .env --profile split
// config --format json` without a Docker engine. Interpolation (${X}, ${X:-default}, ${X:?message}),
// the merge of the files in order, profiles, normalization and relative paths made absolute are
// compose-go's. An error (a required variable unset or empty, an invalid file) goes to stderr and
// the exit status is 1.
//
// The process environment is not read unless --os-env is given (docker compose always reads it, and
// it wins over the env files): the tests pass every variable in an env file so that the machine's
// environment cannot change the model. Built by scripts/services build-compose-config into
// ~/.cache/aiops/bin/compose-config.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
)

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func main() {
	var files, envFiles, profiles listFlag
	flags := flag.NewFlagSet("compose-config", flag.ContinueOnError)
	flags.Var(&files, "f", "a compose file (repeatable, merged in order)")
	flags.Var(&files, "file", "same as -f")
	flags.Var(&envFiles, "env-file", "an env file for interpolation (repeatable; default: .env in the project directory, as docker compose)")
	flags.Var(&profiles, "profile", "a profile to enable (repeatable)")
	projectDir := flags.String("project-directory", "", "the project directory (default: the first file's directory)")
	name := flags.String("project-name", "aiops", "the project name")
	osEnv := flags.Bool("os-env", false, "also read the process environment (it wins over the env files, as in docker compose)")
	if err := flags.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if len(files) == 0 {
		fmt.Fprintln(os.Stderr, "compose-config: give at least one compose file with -f")
		os.Exit(2)
	}

	opts := []cli.ProjectOptionsFn{cli.WithName(*name)}
	if *projectDir != "" {
		opts = append(opts, cli.WithWorkingDirectory(*projectDir))
	}
	if *osEnv {
		opts = append(opts, cli.WithOsEnv)
	}
	opts = append(opts,
		cli.WithEnvFiles(envFiles...),
		cli.WithDotEnv,
		cli.WithProfiles(profiles),
	)
	options, err := cli.NewProjectOptions(files, opts...)
	if err != nil {
		fail(err)
	}
	project, err := options.LoadProject(context.Background())
	if err != nil {
		fail(err)
	}
	// as `docker compose config`: env_file entries resolved into environment (none here today)
	if project, err = project.WithServicesEnvironmentResolved(false); err != nil {
		fail(err)
	}
	out, err := project.MarshalJSON()
	if err != nil {
		fail(err)
	}
	os.Stdout.Write(append(out, '\n'))
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "compose-config: %v\n", err)
	os.Exit(1)
}
