"""perfci agent: build, run and measure the dataplane at a commit; the `perfci` CLI."""
