//! Writes a reconciler needs: create or update, retry on conflict, server-side apply.
