"""What doctor talks to besides the stack's own container: an S3 endpoint (signed requests from the standard library)
and a second server started beside the stack from its image. The checks decide; these only ask and answer."""
