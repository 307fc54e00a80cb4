"""Grafana dashboards as code (grafana-foundation-sdk) and their provisioning.

    dashboards/provisioning/   mount at /etc/grafana/provisioning (datasource + dashboard provider)
    dashboards/json/           generated dashboards; mount at /var/lib/grafana/dashboards/perfci

Regenerate the committed JSON with `python -m dashboards` (from the repository root); `python -m
dashboards --check` exits 1 when the committed files differ from what the code generates.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent
JSON_DIR = ROOT / "json"
PROVISIONING_DIR = ROOT / "provisioning"

# Where docker-compose mounts these in the Grafana container (the provider YAML points there).
CONTAINER_MOUNTS = {
    "/etc/grafana/provisioning": PROVISIONING_DIR,
    "/var/lib/grafana/dashboards/perfci": JSON_DIR,
}
