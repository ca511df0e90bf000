"""What doctor talks to besides the stack's own container: a second server started beside the stack from its image
(an S3 tier's endpoint is reached through stackctl/storage/s3_access.py). The checks decide; these only ask and
answer."""
