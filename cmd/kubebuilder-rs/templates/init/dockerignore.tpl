# The image builds from the sources; build outputs and deployment state stay out.
target/
deploy/
.git/
