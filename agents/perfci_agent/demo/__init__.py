"""`perfci demo`: the whole loop on one machine (scratch history → server → agent → alert →
bisect → plots) on the embedded defaults. The command is :mod:`perfci_agent.commands.demo`."""
