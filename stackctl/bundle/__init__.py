"""The bundle wing: `stackspec` derives every fact the later steps share from a Recipe (pure), `render` writes
them as files (Dockerfile, serve.sh, lmcache.yaml, stack.env, compose.yaml, manifest.json) and names the image."""
