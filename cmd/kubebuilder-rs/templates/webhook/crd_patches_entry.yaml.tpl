- path: {{patch}}
# With the webhook to convert them, the versions besides {{hub}} are served too.
- target:
    kind: CustomResourceDefinition
    name: {{crd_name}}
  patch: |-
{{served}}
