"""The store stage: where a study lives and what it holds, knowing nothing of specs or Ray.

Owns locations and their files on disks and object stores (`storage`; the object-store client and
its retries in `filesystems`, errors no retry mends in `permanent_errors`; a local file replaced
whole in `local_files`), whole folders published with their marker and copied to a node's cache
(`folders`), the name of every file and folder of a study (`layout`), the Parquet results store
(`results`, its tables' schemas in `schemas`), the specs a study ran (`spec_history`). Imports no
other stage: every stage above reads and writes through it.
The stages and every module, in one place: docs/architecture.md.
"""
