# The results service image: api (`perfci server`), worker (`perfci worker`), beat (`perfci beat`)
# and the one-shot schema upgrade (`perfci admin migrate`) all run this image.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# Sources the package needs to install: core/ (the metric catalogue, the result schema the server
# validates uploads with, the analysis), server/, cli/ (the `perfci` app) and agents/ (the app
# registers the agent's commands too); migrations/ + alembic.ini for `perfci admin migrate`.
COPY pyproject.toml README.md alembic.ini ./
COPY core ./core
COPY agents ./agents
COPY server ./server
COPY cli ./cli
COPY migrations ./migrations
# git (+ ssh for ssh clone URLs): the server records each push from its mirror of the repository.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git openssh-client \
    && rm -rf /var/lib/apt/lists/*
# Editable: `perfci admin migrate` reads alembic.ini and migrations/ from this checkout.
RUN pip install -e '.[server]' \
    && useradd --system --home-dir /var/lib/perfci --create-home perfci

USER perfci
ENV PERFCI_DATA_DIR=/var/lib/perfci
EXPOSE 8000
ENTRYPOINT ["perfci"]
CMD ["server", "--host", "0.0.0.0"]
